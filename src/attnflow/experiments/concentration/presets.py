"""The presets of the `concentration` experiment: named sets of config values (`attnflow run NAME`,
`attnflow list` shows them), each with the reason for its values. docs/experiments.md describes
them with what they measured."""

from __future__ import annotations

PRESETS: dict[str, dict[str, object]] = {
    # what `attnflow run` and `make demo` run: every beta converged in N in a minute or two on 2 cores
    # (d = 2 quadrature; one whole-window agreement per beta), five betas spanning a factor 4 so that
    # the theorem rows error_vanishes, guaranteed_duration and best_concentration are decided; N_min =
    # 512: from 256 to 512 the deviation times t_dev of beta = 5, 7, 14 still move by 0.1 to 0.2
    "concentration-demo": {
        "weights": "worked-example-2d",
        "init": "quadrature",
        "betas": [5.0, 7.0, 10.0, 14.0, 20.0],
        "N": "auto",
        "N_min": 512,
        "N_max": 4096,
        "streak": 1,
        "t_max": 10.0,
        "dt_save": 0.05,
        "rtol": 1e-6,
    },
    # d = 3 converged runs need N ~ 10 * 4 pi beta (docs/experiments.md): hours of CPU or a GPU
    "concentration-converged": {
        "N": "auto",
        "init": "quadrature",
        "N_min": 4096,
        "N_max": 262144,
        "threads": 0,
    },
    # d = 2 worked example on nodes graded toward the separatrices, grading levels 0 and 1 (a beta
    # converges when the two agree over [0, t_max]; level 2 moved min W2 by 2.5e-5 at most): four
    # betas, so that the claims table tests the curvature of the laws; about 20 min on 2 shared cores
    # (docs/experiments.md, "concentration-2d"), each further beta 5 to 12 min
    "concentration-2d": {
        "weights": "worked-example-2d",
        "init": "graded",
        "N": "auto",
        "streak": 1,
        "betas": [10.0, 20.0, 30.0, 40.0],
        "t_max": 25.0,
        "zero_reference": True,
    },
    # the same weights as the mean-field flow with its exponentially small tail kept (init =
    # meanfield, levels 0 and 1): betas 10 to 80, t_max past the heuristic departure (delta/lambda)
    # beta of the largest (docs/experiments.md, "concentration-2d-meanfield")
    "concentration-2d-meanfield": {
        "weights": "worked-example-2d",
        "init": "meanfield",
        "N": "auto",
        "streak": 1,
        "betas": [10.0, 14.1, 20.0, 28.3, 40.0, 56.6, 80.0],
        "t_max": 70.0,
        "zero_reference": True,
    },
    # the theorem's window over three decades: the mean-field flow with its tail kept (levels 0 and 1)
    # for 12 log-spaced betas 10 ... 1e4 (factors 10^(3/11)), each to t_max = 26: past t_dev(10 %) of
    # the largest (22.45) by 3.5, and past t* ~ 0.35 beta for beta <= 65.8, so that best_concentration
    # has converged minima; what the theorem rows need, not the departure; two processes compute the
    # levels: 15 min on 2 cores (docs/experiments.md, "concentration-2d-window")
    "concentration-2d-window": {
        "weights": "worked-example-2d",
        "init": "meanfield",
        "N": "auto",
        "streak": 1,
        "betas": [10.0, 18.7, 35.1, 65.8, 123.0, 231.0, 433.0, 811.0, 1520.0, 2850.0, 5340.0, 10000.0],
        "t_max": 26.0,
        "zero_reference": True,
        "workers": 2,
    },
    # the departure over more than a decade: the mean-field flow (levels 0 and 1) for 9 betas 10 ...
    # 160 (factors sqrt 2), t_max = 110 past the heuristic departure 0.666 beta - 8 = 99 of the
    # largest, on two processes; beta = 1000 (departure near t = 660) is out of reach on 2 cores today
    # (docs/experiments.md, "concentration-2d-departure")
    "concentration-2d-departure": {
        "weights": "worked-example-2d",
        "init": "meanfield",
        "N": "auto",
        "streak": 1,
        "betas": [10.0, 14.1, 20.0, 28.3, 40.0, 56.6, 80.0, 113.0, 160.0],
        "t_max": 110.0,
        "zero_reference": True,
        "workers": 2,
    },
    # the ladder alone, d = 3 Fibonacci nodes (formerly the `resolution` experiment)
    "resolution": {
        "betas": [10.0, 30.0, 100.0],
        "N": "auto",
        "N_min": 128,
        "N_max": 2048,
        "init": "fibonacci",
        "t_max": 10.0,
        "dt_save": 0.05,
    },
    # tiny presets: t_max >= ln(max beta), so that they raise no warning about themselves
    "resolution-tiny": {
        "betas": [10.0, 30.0],
        "N": "auto",
        "N_min": 16,
        "N_max": 64,
        "streak": 1,
        "t_max": 4.0,
        "dt_save": 0.1,
        "integrator": "rk4",
        "dt": 0.05,
        "zero_reference": False,
    },
    # seconds on a laptop, with no warning about itself: the d = 2 worked example on quadrature nodes,
    # both betas resolved at N = 128 (resolution ratios 0.27 and 0.38 < 0.5) and t* (5.5, 6.4) inside
    # the window; the tests and examples/quickstart.py use it
    "concentration-tiny": {
        "weights": "worked-example-2d",
        "init": "quadrature",
        "betas": [10.0, 20.0],
        "N": 128,
        "t_max": 8.0,
        "dt_save": 0.2,
        "n_keep": 16,
        "integrator": "rk4",
        "dt": 0.05,
        "zero_reference": False,
    },
}
