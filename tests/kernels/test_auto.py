"""kernel="auto": its choices, the plans it keeps for the kernels, the decisions it keeps per cloud,
the cost constants (shipped, calibrated, a bad cache file) and the calibration command."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import attnflow as af
from attnflow.kernels import auto, calibrate, compiled, reuse, velocity
from attnflow.kernels import costs as kcosts
from attnflow.kernels.cluster import cloud_plans, velocity_cluster
from attnflow.kernels.truncated import cloud_geometry, velocity_truncated
from helpers import one_torch_thread, random_attention  # noqa: F401 (one_torch_thread: a fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def cache(monkeypatch, tmp_path):
    """A fresh, empty cache directory of the kernels."""
    monkeypatch.setenv("ATTNFLOW_CACHE_DIR", str(tmp_path))
    return tmp_path


def uniform(N: int, seed: int = 0) -> torch.Tensor:
    return torch.as_tensor(af.sample_uniform(N, 3, seed=seed))[None]


def collapsed(N: int, kappa: float = 1e7, seed: int = 1) -> torch.Tensor:
    return torch.as_tensor(calibrate.two_clusters(N, np.array([1.0, 0.0, 1.0]) / math.sqrt(2), kappa, seed))[
        None
    ]


# ---------------------------------------------------------------- choices


def test_choices_on_typical_states():
    cold = af.worked_example(1e4)
    assert auto.choose_kernel(uniform(8192), cold) == "truncated"  # few keys count
    assert auto.choose_kernel(collapsed(8192), cold) == "cluster"  # collapsed: the series kernel
    assert auto.choose_kernel(uniform(8192), cold.with_beta(10.0)) == "fused"  # hot: everything counts
    assert auto.choose_kernel(uniform(8192), cold.with_beta(math.inf)) == "zero"
    assert auto.choose_kernel(uniform(auto.MIN_N - 1), cold) == auto.dense_pick(uniform(auto.MIN_N - 1))
    X8 = torch.as_tensor(af.sample_uniform(8192, 8, seed=2))[None]
    assert auto.choose_kernel(X8, random_attention(8, 1e4, seed=3)) == "fused"  # d too large


def test_small_n_takes_the_cheaper_dense_kernel_without_deciding(monkeypatch):
    """Below MIN_N: no decision is made; "fused" where its compiled core runs and its closed form is
    the cheaper, "sdpa" for a few tokens, off the CPU and without the compiled core."""
    att = af.worked_example(100.0)
    auto.forget()
    if auto._variant(uniform(8)) == "compiled":
        assert auto.choose_kernel(uniform(64), att) == "sdpa"  # its smaller fixed cost wins
        assert auto.choose_kernel(uniform(2048), att) == "fused"  # its smaller cost per pair wins
    for N in (64, 512, 2048, auto.MIN_N - 1):
        X = uniform(N)
        M, _, d = X.shape
        v = auto._variant(X)
        cheaper = v == "compiled" and auto.dense_cost("fused", M, N, d, v) < auto.dense_cost(
            "sdpa", M, N, d, "float64"
        )
        assert auto.choose_kernel(X, att) == ("fused" if cheaper else "sdpa")
    assert not auto._decisions  # nothing decided, nothing kept
    monkeypatch.setattr(auto, "_variant", lambda X: "torch")  # no compiled core
    assert auto.choose_kernel(uniform(2048), att) == "sdpa"


def test_the_choice_is_the_cheapest_prediction_and_bounds_hold():
    att = af.worked_example(1e3)
    for X in (uniform(8192), collapsed(8192, kappa=1e4)):
        costs = auto.predict_costs(X, att)
        assert set(costs) == set(auto.CANDIDATES)
        dec = auto.decide(X, att, keep=False)
        assert dec.kernel == min(costs, key=lambda k: costs[k]) and dec.costs == costs and dec.seconds > 0
        bounds = auto._bounds(X, auto.sample_state(X, att), kcosts.active())
        for name in ("truncated", "cluster"):
            assert bounds[name] <= costs[name] or math.isinf(costs[name])


@pytest.fixture
def priced(monkeypatch):
    """predict_costs on fixed numbers: dense kernels 1.0 s (fused) and 2.0 s (sdpa), bounds and
    predictions as the test sets them; returns (set, log): set(N, kept, bounds, truncated, cluster)
    runs predict_costs on N tokens, log lists the plans made, in order."""
    import attnflow.kernels.truncated_geometry as geometry

    log: list[str] = []
    given: dict = {}
    monkeypatch.setattr(auto, "dense_cost", lambda kernel, *a: 1.0 if kernel == "fused" else 2.0)
    monkeypatch.setattr(auto, "sample_state", lambda X, att: auto.Sampled(given["kept"], 1e4))
    monkeypatch.setattr(auto, "_bounds", lambda X, sampled, table: dict(given["bounds"]))
    monkeypatch.setattr(auto, "cluster_counts", lambda *a: log.append("cluster") or {})
    monkeypatch.setattr(auto, "cluster_cost", lambda *a, **k: given["cluster"])
    monkeypatch.setattr(geometry, "candidate_counts", lambda *a, **k: log.append("plan") or {})
    monkeypatch.setattr(geometry, "sampled_counts", lambda *a, **k: log.append("sampled plan") or {})
    monkeypatch.setattr(auto, "truncated_cost", lambda *a: given["truncated"])

    def run(N, kept, bounds, truncated=0.5, cluster=0.5):
        log.clear()
        given.update(kept=kept, bounds=bounds, truncated=truncated, cluster=cluster)
        return auto.predict_costs(torch.zeros(1, N, 3, dtype=torch.float64), af.worked_example(1e3))

    return run, log


def test_a_kernel_is_planned_only_where_it_can_gain_more_than_the_margin(priced):
    run, log = priced
    N = auto.PLAN_MAX_N
    edge = 1.0 - auto.MARGIN  # of the best prediction, fused's 1.0 s
    costs = run(N, 0.01, {"truncated": edge * 1.01, "cluster": math.inf})
    assert log == [] and math.isinf(costs["truncated"])  # it could gain under MARGIN: not planned
    costs = run(N, 0.01, {"truncated": edge * 0.99, "cluster": math.inf})
    assert log == ["plan"] and costs["truncated"] == 0.5  # a cold state: the plan, kept for the kernel
    costs = run(N, 0.01, {"truncated": 0.2, "cluster": 0.3}, truncated=0.3)
    assert log == ["plan"] and math.isinf(costs["cluster"])  # in order of the bounds; 0.3 > edge * 0.3


def test_a_sampled_plan_comes_after_the_cluster_plan_and_a_sure_bound_takes_no_plan(priced):
    """Where the truncated kernel is priced by a sampled plan (which the kernel does not take), the
    cluster kernel is planned first; a truncated bound SURE times below the best is taken as it is."""
    run, log = priced
    big = auto.PLAN_MAX_N + 1
    costs = run(big, 0.01, {"truncated": 0.2, "cluster": 0.3}, cluster=0.21)
    assert log == ["cluster"] and math.isinf(costs["truncated"])  # 0.2 > edge * 0.21: not priced
    costs = run(big, 0.01, {"truncated": 0.1, "cluster": 0.2}, truncated=0.15, cluster=0.3)
    assert log == ["cluster", "sampled plan"] and costs["truncated"] == 0.15
    bound = 0.99 / auto.SURE
    costs = run(big, 0.01, {"truncated": bound, "cluster": math.inf})
    assert log == [] and costs["truncated"] == bound  # it cannot lose to the fused kernel's 1.0 s
    costs = run(auto.PLAN_MAX_N, 0.5, {"truncated": bound, "cluster": math.inf})
    assert log == [] and costs["truncated"] == bound  # a hot state: priced by a sampled plan, so sure
    costs = run(auto.PLAN_MAX_N, 0.01, {"truncated": bound, "cluster": math.inf})
    assert log == ["plan"] and costs["truncated"] == 0.5  # a cold state: its plan is kept, priced


def test_hot_sparse_states_do_not_plan_the_cluster_kernel():
    """A hot uniform cloud (most pairs kept, few neighbours within the series' scale) is not worth a
    cluster plan: its bound is inf and no plan is kept."""
    att = af.worked_example(10.0)
    X = uniform(8192)
    sampled = auto.sample_state(X, att)
    assert sampled.kept > auto.HOT and sampled.neighbours < auto.DENSE
    assert math.isinf(auto.predict_costs(X, att)["cluster"])
    assert not reuse._entries or all(e[2][0] != "cluster" for e in reuse._entries)


def test_sample_state_is_exact_on_its_sample():
    att = af.worked_example(300.0)
    X = af.sample_uniform(500, 3, seed=4)
    s = auto.sample_state(torch.as_tensor(X), att, sample=500)
    S = att.beta * (X @ att.B) @ X.T
    assert s.kept == pytest.approx(np.mean(S - S.max(axis=1, keepdims=True) > -45.0), abs=1e-12)
    assert s.neighbours >= 1  # a token is its own neighbour


# ---------------------------------------------------------------- plans kept for the kernels


def test_the_kernel_takes_the_plan_the_decision_made(monkeypatch):
    from attnflow.kernels import cells

    att = af.worked_example(1e3)
    X = collapsed(8192, kappa=1e4)
    plans = cloud_plans(X, att)
    assert cloud_plans(X, att) is plans  # the same tensor, unmodified: kept
    plan = cells.plan
    monkeypatch.setattr(cells, "plan", lambda *a, **k: pytest.fail("planned again"))
    v = velocity_cluster(X, att)  # takes the kept plan
    monkeypatch.setattr(cells, "plan", plan)
    assert cloud_plans(X.clone(), att) is not plans  # another tensor: planned again
    assert cloud_plans(X, att.with_beta(999.0)) is not plans  # other settings
    X.add_(0.0)  # written in place: its version changes
    assert cloud_plans(X, att) is not plans
    reuse.clear()
    np.testing.assert_array_equal(velocity_cluster(X, att).numpy(), v.numpy())  # same field either way
    geo = cloud_geometry(X, att)
    assert cloud_geometry(X, att) is geo
    np.testing.assert_allclose(velocity_truncated(X, att).numpy(), v.numpy(), atol=1e-12)


def test_velocity_auto_reuses_its_plan_and_matches_sdpa():
    att = af.worked_example(1e3)
    X = collapsed(8192, kappa=1e4)[0].numpy()
    out = velocity(X, att, kernel="auto")
    assert auto._decisions[-1].kernel == "cluster"
    np.testing.assert_allclose(out, velocity(X, att, kernel="sdpa"), atol=1e-10)


# ---------------------------------------------------------------- decisions kept per cloud


def test_a_decision_is_kept_until_the_state_moves():
    att = af.worked_example(1e3)
    X = uniform(8192)
    first = auto.decide(X, att)
    again = auto.decide(X.clone(), att)  # the same state in another tensor
    assert again is first and first.reused == 1
    v = torch.as_tensor(af.sample_uniform(8192, 3, seed=9))[None]
    nudged = X + 0.2 * auto.MOVE_TOL * v
    nudged /= nudged.norm(dim=-1, keepdim=True)
    assert auto.decide(nudged, att) is first  # moved a little: kept
    moved = X + 3 * auto.MOVE_TOL * v
    moved /= moved.norm(dim=-1, keepdim=True)
    assert auto.decide(moved, att) is not first  # moved: decided again
    assert auto.decide(X, att.with_beta(30.0)) is not first  # another attention
    assert auto.decide(X.to(torch.float32), att) is not first  # another dtype
    w = torch.full((1, 8192), 1.0 / 8192)
    assert auto.decide(X, att, weights=w) is not first  # weights given


def test_a_kept_decision_is_made_afresh_after_reuse_max(monkeypatch):
    monkeypatch.setattr(auto, "REUSE_MAX", 2)
    att = af.worked_example(1e3)
    X = uniform(8192)
    first = auto.decide(X, att)
    assert auto.decide(X, att) is first and auto.decide(X, att) is first
    assert auto.decide(X, att) is not first
    assert auto.decide(X, att, keep=False) is not auto.decide(X, att, keep=False)


# ---------------------------------------------------------------- the cost constants


def test_shipped_constants_are_complete():
    assert kcosts.check(kcosts.DEFAULTS) == kcosts.DEFAULTS
    with pytest.raises(ValueError, match=r"truncated\.compiled\.pair must be a number >= 0"):
        bad = json.loads(json.dumps(kcosts.DEFAULTS))
        bad["truncated"]["compiled"]["pair"] = -1.0
        kcosts.check(bad)
    with pytest.raises(ValueError, match="no constants for 'cluster'"):
        kcosts.check({k: v for k, v in kcosts.DEFAULTS.items() if k != "cluster"})


def test_calibration_round_trip_is_used_by_auto(cache):
    assert kcosts.active() is kcosts.DEFAULTS and kcosts.source() == "defaults"
    X, att = uniform(8192), af.worked_example(10.0)
    assert auto.choose_kernel(X, att) == "fused"
    c = json.loads(json.dumps(kcosts.DEFAULTS))
    for variant in c["fused"]:
        c["fused"][variant]["pair"] = 1.0  # a dense kernel that would take hours
    path = kcosts.write(c, {"note": "test"})
    assert path.parent == cache and path.name.startswith("costs-") and path == kcosts.cache_path()
    assert kcosts.read(path) == kcosts.check(c) and kcosts.active() == kcosts.check(c)
    assert kcosts.source() == str(path)
    assert auto.choose_kernel(X, att) != "fused"  # the calibrated constants decide


@pytest.mark.parametrize(
    "damage",
    [
        lambda rec: "{ not json",
        lambda rec: json.dumps({**rec, "format": 99}),
        lambda rec: json.dumps({**rec, "machine": {**rec["machine"], "cpu": "another CPU"}}),
        lambda rec: json.dumps({**rec, "costs": {**rec["costs"], "sdpa": {}}}),
    ],
    ids=["corrupt", "format", "foreign", "incomplete"],
)
def test_a_bad_calibration_file_is_ignored_with_a_warning(cache, damage):
    path = kcosts.write(kcosts.DEFAULTS)
    record = json.loads(path.read_text())
    path.write_text(damage(record))
    with pytest.warns(UserWarning, match="ignoring the kernels' calibration file"):
        assert kcosts.active() is kcosts.DEFAULTS
    X, att = uniform(8192), af.worked_example(10.0)
    assert auto.choose_kernel(X, att) == "fused"


def test_the_fit_recovers_known_constants():
    """Samples timed by a known model give back its constants (non-negative least squares)."""
    truth = json.loads(json.dumps(kcosts.DEFAULTS))
    truth["truncated"]["compiled"] = {"call": 2e-3, "token": 1e-6, "pair": 6e-10, "key": 9e-8}
    truth["fused"]["compiled"] = {"call": 5e-4, "pair": 3e-10, "pair_d": 1e-10}
    rng = np.random.default_rng(0)
    samples = []
    for N in (1024, 4096, 16384, 65536):
        for d in (3, 6):
            s = calibrate.Sample("fused", "compiled", "x", 1, N, d, 0.0)
            s.seconds = calibrate.predict(s, truth)
            samples.append(s)
        for f in (0.01, 0.1, 0.5):
            st = {"pairs": int(f * N * N), "keys": int(rng.uniform(2, 20) * N)}
            s = calibrate.Sample("truncated", "compiled", "x", 1, N, 3, 0.0, st)
            s.seconds = calibrate.predict(s, truth)
            samples.append(s)
    fitted = calibrate.fit(samples)
    for kernel in ("fused", "truncated"):
        for term, value in truth[kernel]["compiled"].items():
            assert fitted[kernel]["compiled"][term] == pytest.approx(value, rel=1e-6)
    assert fitted["cluster"] == kcosts.DEFAULTS["cluster"]  # not measured: kept


def test_the_calibration_command_writes_what_auto_reads(cache, capsys):
    calibrate.main(["--N", "1024", "--repeats", "1"])
    out = capsys.readouterr().out
    path = kcosts.cache_path()
    assert f"written to {path}" in out and "constants:" in out
    assert kcosts.active() == kcosts.read(path) and kcosts.source() == str(path)
    variant = "compiled" if compiled.core() is not None else "torch"
    assert kcosts.active()["fused"][variant] != kcosts.DEFAULTS["fused"][variant]  # measured here
    calibrate.main(["--N", "1024", "--repeats", "1", "--dry-run"])
    assert "written to" not in capsys.readouterr().out
