"""kernel="auto": its choices as a black box (the pick against the kernels timed here, refusals,
kernels registered with a cost model), the plans it keeps for the kernels, the decisions it keeps
per cloud, the cost constants (shipped, calibrated, a bad cache file) and the calibration command."""

from __future__ import annotations

import json
import math
import statistics
import time

import numpy as np
import pytest
import torch

import attnflow as af
from attnflow.kernels import CostModel, KernelSpec, auto, calibrate, compiled, registry, reuse, velocity
from attnflow.kernels import costs as kcosts
from attnflow.kernels.cluster import cloud_plans, velocity_cluster
from attnflow.kernels.dense import velocity_sdpa
from attnflow.kernels.pricing import Pricing
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


# ---------------------------------------------------------------- choices, as a black box

MARGIN = 2.0  # the kernel picked takes at most this many times the fastest one's CPU seconds


def cpu_seconds(fn, X, att, calls: int = 3) -> float:
    """Median CPU seconds of `calls` calls of fn(X, att), each from scratch (no kept plan)."""
    times = []
    for _ in range(calls):
        reuse.clear()
        c0 = time.process_time()
        fn(X, att)
        times.append(time.process_time() - c0)
    return statistics.median(times)


@pytest.mark.parametrize(
    ("state", "beta"),
    [("uniform", 1e4), ("collapsed", 1e3), ("uniform", 10.0)],
    ids=["cold", "collapsed", "hot"],
)
def test_the_pick_is_near_the_fastest_measured_kernel(state, beta):
    """On a cold, a collapsed and a hot cloud of 8192 tokens the kernel "auto" picks takes at most
    MARGIN times the CPU seconds of the fastest candidate, each timed here (median of 3 calls)."""
    X = uniform(8192) if state == "uniform" else collapsed(8192, kappa=1e4)
    att = af.worked_example(beta)
    pick = auto.choose_kernel(X, att)
    seconds = {s.name: cpu_seconds(s.load(), X, att) for s in registry.candidates()}
    fastest = min(seconds, key=lambda k: seconds[k])
    assert seconds[pick] <= MARGIN * seconds[fastest], (pick, seconds)


def test_choices_on_typical_states():
    cold = af.worked_example(1e4)
    assert auto.choose_kernel(uniform(8192), cold) == "truncated"  # few keys count
    assert auto.choose_kernel(collapsed(8192), cold) == "cluster"  # collapsed: the series kernel
    assert auto.choose_kernel(uniform(8192), cold.with_beta(10.0)) == "fused"  # hot: everything counts
    X8 = torch.as_tensor(af.sample_uniform(8192, 8, seed=2))[None]
    assert auto.choose_kernel(X8, random_attention(8, 1e4, seed=3)) == "fused"  # d too large


def test_refusals():
    """beta = inf: the zero-temperature kernel, nothing priced; no state: sdpa; a kernel is not
    priced above its max_d; below MIN_N nothing is decided or kept and the pick is priced in closed
    form ("sdpa" without the compiled core)."""
    att = af.worked_example(1e4)
    assert auto.choose_kernel(uniform(8192), att.with_beta(math.inf)) == "zero"
    assert auto.choose_kernel(None, att) == "sdpa"
    X8 = torch.as_tensor(af.sample_uniform(8192, 8, seed=2))[None]
    costs = auto.predict_costs(X8, random_attention(8, 1e4, seed=3))
    assert math.isinf(costs["truncated"]) and math.isinf(costs["cluster"])
    closed = {s.name for s in registry.candidates() if s.cost is not None and s.cost.bound is None}
    for N in (64, 2048, auto.MIN_N - 1):
        assert auto.choose_kernel(uniform(N), att) in closed
    with compiled.disabled():
        assert auto.choose_kernel(uniform(2048), att) == "sdpa"
    assert not auto._decisions


def test_bounds_are_below_the_prices():
    """Each cost model's lower bound from the sample is at most its price, on a cold uniform and a
    collapsed cloud."""
    att = af.worked_example(1e3)
    for X in (uniform(8192), collapsed(8192, kappa=1e4)):
        p = Pricing(X, att, None, kcosts.active(), sampled=auto.sample_state(X, att))
        for spec in registry.candidates():
            if spec.cost is not None and spec.cost.bound is not None:
                bound = spec.cost.bound(p)
                assert math.isinf(bound) or bound <= spec.cost.price(p), spec.name


def toy(name: str, log: list, price: float, bound: float | None = None, late: bool = False) -> KernelSpec:
    """A kernel (the sdpa field) whose cost model predicts `price` (logged when asked) and has the
    lower bound `bound` (None: a closed form)."""
    cost = CostModel(
        ("call",),
        {"any": {"call": price}},
        seconds=lambda work, c: c["call"],
        price=lambda p: log.append(name) or price,
        bound=None if bound is None else (lambda p: bound),
        late=lambda p: late,
    )
    return KernelSpec(name, velocity_sdpa, "a test kernel", cost=cost)


def test_a_registered_kernel_with_a_cost_model_is_a_candidate():
    """Closed forms are priced on every state (small ones too) and picked where cheapest."""
    att = af.worked_example(1e3)
    log: list = []
    with registry.registered(toy("toy", log, price=1e-12)):
        assert "toy" in auto.predict_costs(uniform(8192), att)
        assert auto.choose_kernel(uniform(8192), att) == "toy"
        assert auto.choose_kernel(uniform(512), att) == "toy"  # below MIN_N: the cheapest closed form
        assert auto.choose_kernel(uniform(8192), att.with_beta(math.inf)) == "zero"
    with registry.registered(toy("slow", log, price=1e6)):
        assert auto.choose_kernel(uniform(8192), att) != "slow"
    assert "toy" not in auto.predict_costs(uniform(8192), att)


def test_a_kernel_is_priced_only_where_its_bound_can_gain_the_margin():
    """A kernel with a bound is priced in increasing order of the bounds, late ones last, and only
    where its bound is below (1 - MARGIN) times the best price so far (here a closed form of 1 ns,
    below every shipped kernel's bound, so only the toys are priced)."""
    att, X = af.worked_example(1e3), uniform(8192)
    log: list = []
    best = 1e-9
    edge = (1.0 - auto.MARGIN) * best
    with registry.registered(toy("base", log, price=best)):
        with registry.registered(toy("far", log, price=0.0, bound=edge * 1.01)):
            costs = auto.predict_costs(X, att)
            assert log == ["base"] and math.isinf(costs["far"])  # it could gain under MARGIN
        log.clear()
        with registry.registered(toy("near", log, price=0.5 * best, bound=edge * 0.99)):
            assert auto.predict_costs(X, att)["near"] == 0.5 * best and log == ["base", "near"]
        log.clear()
        late = toy("late", log, price=0.1 * best, bound=0.19 * best, late=True)  # first by its bound alone
        first = toy("first", log, price=0.2 * best, bound=0.2 * best)
        with registry.registered(late), registry.registered(first):
            costs = auto.predict_costs(X, att)
            assert log == ["base", "first"] and auto.choose_kernel(X, att) == "first"
        assert costs["first"] == 0.2 * best and math.isinf(costs["late"])  # 0.19 > 0.9 x 0.2: not priced


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


def test_calibration_times_every_call_cold():
    """The truncated kernel keeps its geometry across moves; a calibration call must not take it
    (its constants price a state the kernel has not seen), and auto.forget() drops it too."""
    X = torch.as_tensor(af.sample_uniform(512, 3, seed=2))
    att = af.worked_example(1000.0)
    run = next(r for r in calibrate.runs(3) if r.kernel == "truncated")
    stats = [calibrate._run(run, X, att)[1] for _ in range(2)]
    assert [s["geometry_built"] for s in stats] == [1, 1] and all(s["geometry_kept"] == 0 for s in stats)
    kept: dict = {}
    velocity_truncated(X, att)
    velocity_truncated(X.clone(), att, stats=kept)  # another tensor, the same state: kept across moves
    assert kept["geometry_kept"] == 1  # what calibration must not see
    auto.forget()
    cold: dict = {}
    velocity_truncated(X.clone(), att, stats=cold)
    assert cold["geometry_built"] == 1 and cold["geometry_kept"] == 0
