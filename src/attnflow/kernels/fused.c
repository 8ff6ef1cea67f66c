/* The compiled core of the "fused" velocity kernel (kernels/fused.py): for every query i the dense,
 * max-shifted softmax sums over all keys j,
 *
 *     Z_i = sum_j 2^(s_ij - m_i),   N_i = sum_j 2^(s_ij - m_i) v_j,   s_ij = q_i . k_j + l_j,
 *
 * in base-2 units: the caller passes q_i = log2(e) beta B^T y_i and l_j = log2(e) log w_j, so that
 * 2^s_ij = w_j e^(beta y_i^T B x_j); m_i is the row maximum rounded to an integer.  Two passes over
 * the keys per group of queries (the maximum, then the sums); the scores never leave registers.
 *
 * Vectorised over queries: W = 8 queries per vector (GNU C vector extensions, which gcc and clang map
 * to AVX-512, AVX2, SSE or NEON), QV vectors at a time, each key's numbers broadcast from its row.
 * 2^x: x = k + r with k = round(x) (the 1.5 2^52 shifter) and |r| <= 1/2, 2^r by the degree-10
 * interpolant at the Chebyshev points of [-1/2, 1/2] (relative error 3.2e-16), 2^k by the exponent
 * bits.  Scores more than 1000 below the row maximum are raised to it (their weights, 2^-1000 of the
 * largest, change no sum in float64) so that 2^k stays a normal number.
 *
 * Layouts (float64): q (D, ldq), query-major within each coordinate, n queries from q (n a multiple
 * of W * QV); rows (nk, 2 D + 1): k_j (D), l_j, v_j (D); out (D + 2, ldq): Z_i, N_i (D), m_i.
 * `fused_cells` runs the same sums on cells: each a list of queries against its own list of keys
 * (the truncated kernel's cells with their candidate keys, the cluster kernel's direct pairs).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define W 8
#define MAX_D 8
#define MAX_QV 3

typedef double vd __attribute__((vector_size(8 * W), aligned(8)));
typedef int64_t vl __attribute__((vector_size(8 * W), aligned(8)));

static const double SHIFTER = 0x1.8p52;  /* x + SHIFTER - SHIFTER rounds x to an integer */
static const double FLOOR = 1000.0;      /* scores below m_i - FLOOR count as m_i - FLOOR */

static inline vd vset(double x) { return (vd){x, x, x, x, x, x, x, x}; }

static inline vd vmax(vd a, vd b)
{
    vl m = a > b;
    return (vd)(((vl)a & m) | ((vl)b & ~m));
}

/* 2^(s - m) for s in [m - FLOOR, m + 1/2] given c = SHIFTER - m (m an integer) */
static inline vd exp2_shifted(vd s, vd c)
{
    vd t = s + c;      /* SHIFTER + round(s - m) */
    vd r = s - (t - c); /* s - round(s), exact, in [-1/2, 1/2] */
    vd p = vset(7.072585949269223e-09);
    p = p * r + vset(1.0208690299958306e-07);
    p = p * r + vset(1.321544258792169e-06);
    p = p * r + vset(1.5252657260200837e-05);
    p = p * r + vset(0.0001540353044173605);
    p = p * r + vset(0.0013333558230164974);
    p = p * r + vset(0.009618129107606888);
    p = p * r + vset(0.05550410866444772);
    p = p * r + vset(0.24022650695910097);
    p = p * r + vset(0.69314718055995);
    p = p * r + vset(1.0);
    vl bits = ((vl)t - ((vl)vset(SHIFTER) - 1023)) << 52; /* 2^round(s - m) */
    return p * (vd)bits;
}

static inline __attribute__((always_inline)) vd score(const int D, const vd *qv, const double *row)
{
    vd s = vset(row[D]);
    for (int l = 0; l < D; l++) s += qv[l] * row[l];
    return s;
}

static inline __attribute__((always_inline)) void sums(
    const int D, const int QV, int64_t n, int64_t ldq, const double *q, int64_t nk,
    const double *rows, double *out)
{
    const int R = 2 * D + 1;
    for (int64_t i0 = 0; i0 < n; i0 += W * QV) {
        vd qv[MAX_QV][MAX_D], m[MAX_QV], c[MAX_QV], lo[MAX_QV], acc[MAX_QV][MAX_D + 1];
        for (int g = 0; g < QV; g++) {
            for (int l = 0; l < D; l++) qv[g][l] = *(const vd *)(q + l * ldq + i0 + g * W);
            m[g] = vset(-1e300);
        }
        for (int64_t j = 0; j < nk; j++) {
            const double *row = rows + R * j;
            for (int g = 0; g < QV; g++) m[g] = vmax(m[g], score(D, qv[g], row));
        }
        for (int g = 0; g < QV; g++) {
            vd mr = (m[g] + vset(SHIFTER)) - vset(SHIFTER);
            c[g] = vset(SHIFTER) - mr;
            lo[g] = mr - vset(FLOOR);
            for (int l = 0; l <= D; l++) acc[g][l] = vset(0.0);
        }
        for (int64_t j = 0; j < nk; j++) {
            const double *row = rows + R * j;
            for (int g = 0; g < QV; g++) {
                vd e = exp2_shifted(vmax(score(D, qv[g], row), lo[g]), c[g]);
                acc[g][0] += e;
                for (int l = 0; l < D; l++) acc[g][l + 1] += e * vset(row[D + 1 + l]);
            }
        }
        for (int g = 0; g < QV; g++) {
            for (int l = 0; l <= D; l++) *(vd *)(out + l * ldq + i0 + g * W) = acc[g][l];
            *(vd *)(out + (D + 1) * ldq + i0 + g * W) = vset(SHIFTER) - c[g];
        }
    }
}

/* query vectors per group by dimension: as many as the registers hold */
#define GROUP(D) ((D) <= 3 ? 3 : (D) <= 5 ? 2 : 1)
#define SUMS(D)                                                                                     \
    static void sums_##D(int64_t n, int64_t ldq, const double *q, int64_t nk, const double *rows,  \
                         double *out)                                                              \
    {                                                                                               \
        sums(D, GROUP(D), n, ldq, q, nk, rows, out);                                                \
    }
SUMS(2)
SUMS(3)
SUMS(4)
SUMS(5)
SUMS(6)
SUMS(7)
SUMS(8)

/* queries per group for dimension d (n must be a multiple of it); 0 for an unsupported d */
int64_t fused_group(int d) { return d >= 2 && d <= MAX_D ? (int64_t)W * GROUP(d) : 0; }

typedef void (*sums_fn)(int64_t, int64_t, const double *, int64_t, const double *, double *);
static const sums_fn TABLE[MAX_D + 1] = {0, 0, sums_2, sums_3, sums_4, sums_5, sums_6, sums_7, sums_8};

/* the sums above for dimension d; returns 0, or -1 for an unsupported d or a bad n */
int fused_sums(int d, int64_t n, int64_t ldq, const double *q, int64_t nk, const double *rows,
               double *out)
{
    if (fused_group(d) == 0 || n % fused_group(d) != 0 || nk < 1) return -1;
    TABLE[d](n, ldq, q, nk, rows, out);
    return 0;
}

/* The sums for the cells c0 .. c1 - 1: cell c's queries are the rows qidx[qs[c] .. qs[c + 1]) of q
 * (nq, d), its keys the rows kidx[ks[c] .. ks[c + 1]) of `rows` (as above); each query's results go
 * to its row of out (nq, d + 2): Z_i, N_i (d), m_i.  A query in several cells gets the last one's.
 * Returns 0, -1 for an unsupported d or a cell without keys, -2 when scratch memory runs out. */
int fused_cells(int d, int64_t c0, int64_t c1, const double *q, const int64_t *qidx, const int64_t *qs,
                const double *rows, const int64_t *kidx, const int64_t *ks, double *out)
{
    const int64_t G = fused_group(d), R = 2 * d + 1;
    int64_t lmax = 0, kmax = 0;
    if (G == 0) return -1;
    for (int64_t c = c0; c < c1; c++) {
        if (ks[c + 1] <= ks[c]) return -1;
        lmax = qs[c + 1] - qs[c] > lmax ? qs[c + 1] - qs[c] : lmax;
        kmax = ks[c + 1] - ks[c] > kmax ? ks[c + 1] - ks[c] : kmax;
    }
    lmax = (lmax + G - 1) / G * G;
    double *keys = malloc(sizeof(double) * (size_t)(kmax * R + (2 * d + 2) * lmax + 1));
    if (keys == NULL) return -2;
    double *qt = keys + kmax * R, *res = qt + d * lmax;
    for (int64_t c = c0; c < c1; c++) {
        const int64_t nq = qs[c + 1] - qs[c], nk = ks[c + 1] - ks[c], n = (nq + G - 1) / G * G;
        if (nq == 0) continue;
        for (int64_t j = 0; j < nk; j++) memcpy(keys + R * j, rows + R * kidx[ks[c] + j], sizeof(double) * R);
        for (int64_t i = 0; i < n; i++) { /* padding: the cell's first query again */
            const double *qi = q + d * qidx[qs[c] + (i < nq ? i : 0)];
            for (int l = 0; l < d; l++) qt[l * n + i] = qi[l];
        }
        TABLE[d](n, n, qt, nk, keys, res);
        for (int64_t i = 0; i < nq; i++)
            for (int l = 0; l < d + 2; l++) out[(d + 2) * qidx[qs[c] + i] + l] = res[l * n + i];
    }
    free(keys);
    return 0;
}

/* The largest shifted score each key gets from the queries of its cells: for every cell c in
 * c0 .. c1 - 1 and key j of it (the rows kidx[ks[c] .. ks[c + 1]) of `rows`, as above),
 * out[j] = max(out[j], max_i a_i + q_i . k_j) over its queries i (the rows qidx[qs[c] .. qs[c + 1])
 * of q (nq, d)).  Keys shared by several cells: run the cells of one `out` on one thread.
 * Returns 0, -1 for an unsupported d, -2 when scratch memory runs out. */
int fused_colmax(int d, int64_t c0, int64_t c1, const double *q, const double *a, const int64_t *qidx,
                 const int64_t *qs, const double *rows, const int64_t *kidx, const int64_t *ks, double *out)
{
    const int64_t R = 2 * d + 1;
    int64_t lmax = 0;
    if (d < 2 || d > MAX_D) return -1;
    for (int64_t c = c0; c < c1; c++) lmax = qs[c + 1] - qs[c] > lmax ? qs[c + 1] - qs[c] : lmax;
    lmax = (lmax + W - 1) / W * W;
    double *qt = malloc(sizeof(double) * (size_t)((d + 1) * lmax + 1));
    if (qt == NULL) return -2;
    for (int64_t c = c0; c < c1; c++) {
        const int64_t nq = qs[c + 1] - qs[c], n = (nq + W - 1) / W * W;
        if (nq == 0) continue;
        for (int64_t i = 0; i < n; i++) { /* padding: a = -1e300, never the maximum */
            const int64_t row = qidx[qs[c] + (i < nq ? i : 0)];
            qt[i] = i < nq ? a[row] : -1e300;
            for (int l = 0; l < d; l++) qt[(l + 1) * n + i] = q[d * row + l];
        }
        for (int64_t jj = ks[c]; jj < ks[c + 1]; jj++) {
            const double *k = rows + R * kidx[jj];
            vd best = vset(-1e300);
            for (int64_t i = 0; i < n; i += W) {
                vd s = *(const vd *)(qt + i);
                for (int l = 0; l < d; l++) s += *(const vd *)(qt + (l + 1) * n + i) * vset(k[l]);
                best = vmax(best, s);
            }
            double m = out[kidx[jj]];
            for (int l = 0; l < W; l++) m = best[l] > m ? best[l] : m;
            out[kidx[jj]] = m;
        }
    }
    free(qt);
    return 0;
}

/* ---- The float32 twin: the same two passes in float32 arithmetic -------------------------------
 *
 * WF = 16 queries per vector (twice the float64 width), scores, maxima, the exponential and the sums
 * over blocks of KB keys in float32; the block sums are added into float64 totals (the rounding of a
 * running float32 sum would grow with the number of keys).  2^x: the 1.5 2^23 shifter (|m_i| < 2^22),
 * the degree-6 interpolant at the Chebyshev points of [-1/2, 1/2] (relative error 1.0e-7, float32
 * rounding included), 2^k by the exponent bits; the floor is 120 below the row maximum (2^-120
 * stays a normal float32).  Layouts as above with q and rows float32 and out float64.
 */
#define WF 16
#define KB 64

typedef float vf __attribute__((vector_size(4 * WF), aligned(4)));
typedef int32_t vi __attribute__((vector_size(4 * WF), aligned(4)));
typedef float vf8 __attribute__((vector_size(32), aligned(4)));
typedef double vd8 __attribute__((vector_size(64), aligned(8)));

static const float SHIFTER32 = 0x1.8p23f;
static const float FLOOR32 = 120.0f;

static inline vf fset(float x) { return (vf){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

static inline vf fmax16(vf a, vf b)
{
    vi m = a > b;
    return (vf)(((vi)a & m) | ((vi)b & ~m));
}

static inline vf exp2_shifted32(vf s, vf c)
{
    vf t = s + c;
    vf r = s - (t - c);
    vf p = fset(0.00015461444854736328f);
    p = p * r + fset(0.0013400427997112274f);
    p = p * r + fset(0.009618056938052177f);
    p = p * r + fset(0.05550327152013779f);
    p = p * r + fset(0.24022650718688965f);
    p = p * r + fset(0.6931471824645996f);
    p = p * r + fset(1.0f);
    vi bits = ((vi)t - ((vi)fset(SHIFTER32) - 127)) << 23;
    return p * (vf)bits;
}

static inline __attribute__((always_inline)) vf score32(const int D, const vf *qv, const float *row)
{
    vf s = fset(row[D]);
    for (int l = 0; l < D; l++) s += qv[l] * row[l];
    return s;
}

/* add the float32 block sums acc (WF lanes) into the float64 totals tot (WF doubles) */
static inline void flush32(vf acc, double *tot)
{
    float a[WF];
    memcpy(a, &acc, sizeof a);
    vd8 lo = __builtin_convertvector(*(const vf8 *)a, vd8), hi = __builtin_convertvector(*(const vf8 *)(a + 8), vd8);
    *(vd8 *)tot += lo;
    *(vd8 *)(tot + 8) += hi;
}

static inline __attribute__((always_inline)) void sums32(
    const int D, const int QV, int64_t n, int64_t ldq, const float *q, int64_t nk, const float *rows,
    double *out)
{
    const int R = 2 * D + 1;
    for (int64_t i0 = 0; i0 < n; i0 += WF * QV) {
        vf qv[MAX_QV][MAX_D], m[MAX_QV], c[MAX_QV], lo[MAX_QV], acc[MAX_QV][MAX_D + 1];
        double tot[MAX_QV][MAX_D + 1][WF] __attribute__((aligned(64)));
        for (int g = 0; g < QV; g++) {
            for (int l = 0; l < D; l++) qv[g][l] = *(const vf *)(q + l * ldq + i0 + g * WF);
            m[g] = fset(-1e30f);
        }
        for (int64_t j = 0; j < nk; j++) {
            const float *row = rows + R * j;
            for (int g = 0; g < QV; g++) m[g] = fmax16(m[g], score32(D, qv[g], row));
        }
        for (int g = 0; g < QV; g++) {
            vf mr = (m[g] + fset(SHIFTER32)) - fset(SHIFTER32);
            c[g] = fset(SHIFTER32) - mr;
            lo[g] = mr - fset(FLOOR32);
            for (int l = 0; l <= D; l++) memset(tot[g][l], 0, sizeof tot[g][l]);
        }
        for (int64_t j0 = 0; j0 < nk; j0 += KB) {
            const int64_t j1 = j0 + KB < nk ? j0 + KB : nk;
            for (int g = 0; g < QV; g++)
                for (int l = 0; l <= D; l++) acc[g][l] = fset(0.0f);
            for (int64_t j = j0; j < j1; j++) {
                const float *row = rows + R * j;
                for (int g = 0; g < QV; g++) {
                    vf e = exp2_shifted32(fmax16(score32(D, qv[g], row), lo[g]), c[g]);
                    acc[g][0] += e;
                    for (int l = 0; l < D; l++) acc[g][l + 1] += e * fset(row[D + 1 + l]);
                }
            }
            for (int g = 0; g < QV; g++)
                for (int l = 0; l <= D; l++) flush32(acc[g][l], tot[g][l]);
        }
        for (int g = 0; g < QV; g++) {
            for (int l = 0; l <= D; l++) memcpy(out + l * ldq + i0 + g * WF, tot[g][l], sizeof tot[g][l]);
            vf mr = fset(SHIFTER32) - c[g];
            for (int k = 0; k < WF; k++) out[(D + 1) * ldq + i0 + g * WF + k] = (double)mr[k];
        }
    }
}

#define GROUP32(D) ((D) <= 3 ? 3 : (D) <= 5 ? 2 : 1)
#define SUMS32(D)                                                                                   \
    static void sums32_##D(int64_t n, int64_t ldq, const float *q, int64_t nk, const float *rows,  \
                           double *out)                                                            \
    {                                                                                               \
        sums32(D, GROUP32(D), n, ldq, q, nk, rows, out);                                            \
    }
SUMS32(2)
SUMS32(3)
SUMS32(4)
SUMS32(5)
SUMS32(6)
SUMS32(7)
SUMS32(8)

/* queries per group of the float32 sums for dimension d; 0 for an unsupported d */
int64_t fused_group32(int d) { return d >= 2 && d <= MAX_D ? (int64_t)WF * GROUP32(d) : 0; }

typedef void (*sums32_fn)(int64_t, int64_t, const float *, int64_t, const float *, double *);
static const sums32_fn TABLE32[MAX_D + 1] = {0, 0, sums32_2, sums32_3, sums32_4, sums32_5, sums32_6, sums32_7, sums32_8};

/* `fused_sums` in float32: q (d, ldq) and rows (nk, 2 d + 1) float32, out (d + 2, ldq) float64;
 * the caller keeps |q_i . k_j + l_j| below 2^21 */
int fused_sums32(int d, int64_t n, int64_t ldq, const float *q, int64_t nk, const float *rows, double *out)
{
    if (fused_group32(d) == 0 || n % fused_group32(d) != 0 || nk < 1) return -1;
    TABLE32[d](n, ldq, q, nk, rows, out);
    return 0;
}

/* `fused_cells` by the float32 twin: q (nq, d) and rows float32, out (nq, d + 2) float64 */
int fused_cells32(int d, int64_t c0, int64_t c1, const float *q, const int64_t *qidx, const int64_t *qs,
                  const float *rows, const int64_t *kidx, const int64_t *ks, double *out)
{
    const int64_t G = fused_group32(d), R = 2 * d + 1;
    int64_t lmax = 0, kmax = 0;
    if (G == 0) return -1;
    for (int64_t c = c0; c < c1; c++) {
        if (ks[c + 1] <= ks[c]) return -1;
        lmax = qs[c + 1] - qs[c] > lmax ? qs[c + 1] - qs[c] : lmax;
        kmax = ks[c + 1] - ks[c] > kmax ? ks[c + 1] - ks[c] : kmax;
    }
    lmax = (lmax + G - 1) / G * G;
    float *keys = malloc(sizeof(float) * (size_t)(kmax * R + d * lmax + 1));
    double *res = malloc(sizeof(double) * (size_t)((d + 2) * lmax + 1));
    if (keys == NULL || res == NULL) {
        free(keys);
        free(res);
        return -2;
    }
    float *qt = keys + kmax * R;
    for (int64_t c = c0; c < c1; c++) {
        const int64_t nq = qs[c + 1] - qs[c], nk = ks[c + 1] - ks[c], n = (nq + G - 1) / G * G;
        if (nq == 0) continue;
        for (int64_t j = 0; j < nk; j++) memcpy(keys + R * j, rows + R * kidx[ks[c] + j], sizeof(float) * R);
        for (int64_t i = 0; i < n; i++) {
            const float *qi = q + d * qidx[qs[c] + (i < nq ? i : 0)];
            for (int l = 0; l < d; l++) qt[l * n + i] = qi[l];
        }
        TABLE32[d](n, n, qt, nk, keys, res);
        for (int64_t i = 0; i < nq; i++)
            for (int l = 0; l < d + 2; l++) out[(d + 2) * qidx[qs[c] + i] + l] = res[l * n + i];
    }
    free(keys);
    free(res);
    return 0;
}
