"""What an experiment needs of its weights, and every other value a config refuses when it is made:
one line naming the key, never a traceback from deep inside, a warning, or a late failure.

The property test draws any key of any experiment and an out-of-range, infinite, huge, wrongly
typed or deeply nested value: the config is made, or refused in one line that names the key.
"""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnflow as af
from attnflow._checks import total_memory
from attnflow.experiments import ConfigError, get_experiment, load_config, run_experiment
from attnflow.experiments.config import ConfigWarning
from attnflow.experiments.needs import INVERTIBLE_B, LIMIT, REFERENCE, SOURCES, needs_of


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """.npz files of weights: a singular K, a non-symmetric A with a real top eigenvalue, and
    entries of 1e300 (B overflows float64)."""
    folder = tmp_path_factory.mktemp("weights")
    files = {
        "singular": {"Q": np.eye(4), "K": np.diag([2.0, 1.0, 1.0, 0.0]), "V": np.eye(4)},
        "nonsymmetric": {
            "Q": np.eye(3),
            "K": np.diag([3.0, 1.0, 1.0 / 3.0]),
            "V": np.array([[1.0, 2.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]]),
        },
        "huge": {"Q": np.eye(3) * 1e300, "K": np.eye(3) * 1e300, "V": np.eye(3)},
    }
    for name, arrays in files.items():
        np.savez(folder / f"{name}.npz", **arrays)
    return {name: str(folder / f"{name}.npz") for name in files}


def one_line_error(name: str, overrides: list[str], *needles: str) -> str:
    """load_config refuses: a ConfigError of one line holding every needle, and no warning on the way."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError) as info:
            load_config(name, overrides)
    message = str(info.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


# ------------------------------------------------------------------------------------ the needs


def test_each_experiment_declares_its_needs():
    assert needs_of(get_experiment("concentration").Config) == (INVERTIBLE_B, LIMIT, SOURCES)
    assert needs_of(get_experiment("zero-temperature").Config) == (INVERTIBLE_B, LIMIT, REFERENCE)
    assert needs_of(get_experiment("terminal").Config) == needs_of(get_experiment("layers").Config) == ()


def test_a_singular_B_is_refused_where_it_is_needed_only(weights):
    path = weights["singular"]
    message = one_line_error(
        "concentration-tiny",
        [f"weights={path}", "init=uniform"],  # d = 4: random clouds
        "B = Q^T K is singular (condition number inf",
        "concentration needs an invertible B",
        f"`attnflow check {path}` gives the numbers",
        "the terminal experiment",
    )
    assert "RuntimeWarning" not in message
    zero = [f"weights={path}", "init=uniform"]
    one_line_error("zero-temperature-tiny", zero, "zero-temperature needs an invertible B")
    for name in ("terminal-tiny", "layers-tiny"):  # finite beta only: B may be singular
        assert load_config(name, [f"weights={path}"]).weights == path


def test_a_complex_top_eigenvalue_is_refused_with_the_weights_options():
    message = one_line_error(
        "concentration-tiny",
        ["weights=random", "symmetric=false", "weights_seed=1"],
        "are not real",
        "needs the limit Pi of the zero-temperature flow",
        "symmetric = true",
        "another weights_seed",
    )
    assert "attnflow check" not in message  # (named weights: no file to check)
    assert load_config("terminal-tiny", ["weights=random", "symmetric=false", "weights_seed=1"])


def test_the_reference_is_needed_by_init_quadrature_only(weights):
    path = weights["nonsymmetric"]
    one_line_error(
        "zero-temperature-tiny",
        [f"weights={path}", "init=quadrature"],
        "needs symmetric A",
        "zero-temperature needs the N = infinity reference",
    )
    assert load_config("zero-temperature-tiny", [f"weights={path}"]).init == "fibonacci"


def test_weights_beyond_float64_are_refused_without_numpy_warnings(weights):
    one_line_error(
        "terminal-tiny", [f"weights={weights['huge']}"], f"weights = {weights['huge']}", "rescale Q and K"
    )


def test_symmetric_false_runs_with_the_spectral_projector():
    """A non-symmetric A with a real top eigenvalue: W2 is measured to the limit of the exact
    zero-temperature flow (the spectral projector's), and the claims say the theorem does not apply."""
    config = load_config("concentration-tiny", ["weights=random", "symmetric=false", "N=16", "n_keep=16"])
    ds = run_experiment(config)
    att = af.random_attention(3, 0, symmetric=False)
    A = np.asarray(att.A)
    assert np.linalg.norm(A - A.T) > 0.1 * np.linalg.norm(A)
    # the spectral projector, from NumPy's eigendecomposition: P1 = u l^T / (l^T u)
    lam, R = np.linalg.eig(A)
    k = int(np.argmax(lam.real))
    assert abs(lam[k].imag) < 1e-12
    lam_l, L = np.linalg.eig(A.T)
    left = np.real(L[:, int(np.argmin(np.abs(lam_l - lam[k])))])
    right = np.real(R[:, k])
    P1 = np.outer(right, left) / (left @ right)
    X0 = ds.x_zero.values[0].astype(np.float64)
    X0 /= np.linalg.norm(X0, axis=1, keepdims=True)
    Pi = X0 @ P1.T
    Pi /= np.linalg.norm(Pi, axis=1, keepdims=True)
    np.testing.assert_allclose(af.project(X0, att, spectral=True), Pi, atol=1e-9)
    # it is the limit of the exact flow: the stored zero-temperature tokens approach it, and a long
    # run of the flow reaches it
    far = af.simulate_zero_temperature(X0, att.with_beta(math.inf), [0.0, 60.0]).x[-1]
    np.testing.assert_allclose(far, Pi, atol=1e-6)
    claims = json.loads(ds.attrs["claims"])
    theorem = [c for c in claims if c["kind"] == "theorem"]
    assert theorem and {c["verdict"] for c in theorem} == {"not applicable"}
    assert all("assumption 1 of the theorem fails: A is not symmetric" in c["note"] for c in theorem)
    assert "not applicable" not in {c["verdict"] for c in claims if c["kind"] != "theorem"}
    assert np.all(np.isfinite(ds.w2.values)) and np.all(np.isfinite(ds.w2_zero.values))


# ----------------------------------------------------------------------- other config refusals


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("concentration-tiny", "dt"),
        ("concentration-tiny", "rtol"),
        ("concentration-tiny", "atol"),
        ("concentration-tiny", "t_max"),
        ("concentration-tiny", "kappa"),
        ("terminal-tiny", "t_max"),
        ("zero-temperature-tiny", "t_max"),
        ("layers-tiny", "T"),
    ],
)
@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_non_finite_numbers_are_refused(name, key, value):
    one_line_error(name, [f"{key}={value}"], f"{key}: must be a finite number")


def test_seeds_beyond_64_bits_are_refused():
    for key, value in (("seed", "99999999999999999999999"), ("weights_seed", str(2**63))):
        one_line_error("concentration-tiny", [f"{key}={value}"], f"{key}: a seed is stored as a 64-bit")
    one_line_error("concentration-tiny", [f"seeds=[1, {2**64}]"], "seeds[1]: a seed is stored")
    assert load_config("concentration-tiny", [f"seed={2**63 - 1}"]).seed == 2**63 - 1


def test_values_nested_too_deeply_are_refused(tmp_path):
    deep = "[" * 3000 + "]" * 3000
    one_line_error("concentration-tiny", [f"betas={deep}"], "--set betas=...", "more than 16 deep")
    path = tmp_path / "deep.toml"
    path.write_text(f"betas = {deep}\n")
    one_line_error(str(path), [], f"config file {path}", "too deeply")
    path.write_text("betas = " + "[" * 40 + "]" * 40 + "\n")
    one_line_error(str(path), [], f"config file {path}", "more than 16 deep")


def test_a_fixed_step_run_of_more_than_a_billion_steps_is_refused():
    one_line_error("concentration-tiny", ["dt=1e-300"], "dt = 1e-300 makes 8e+300 steps of rk4")
    assert load_config("concentration-tiny", ["dt=1e-300", "integrator=adaptive"]).dt == 1e-300  # unused


def test_random_weights_have_a_largest_d_and_threads_a_largest_count():
    one_line_error("terminal-tiny", ["weights=random", "d=100000"], "d <= 512, got d = 100000")
    one_line_error("terminal-tiny", ["threads=99999999999"], "threads:")


def test_the_memory_check_counts_the_run_s_d_and_clouds():
    memory = total_memory()
    if memory is None:
        pytest.skip("this machine does not say its memory")
    times = 101  # t_max = 10, dt_save = 0.1
    N = int(memory / (times * 8 * 100))  # d = 3: 3 % of the memory; d = 250: 2.5 times the memory
    grid = ["t_max=10.0", "dt_save=0.1"]
    assert load_config("terminal", [*grid, "weights=random", "d=3", f"N={N}"])
    one_line_error("terminal", [*grid, "weights=random", "d=250", f"N={N}"], f"N = {N} tokens x d = 250")
    seeds = ", ".join(map(str, range(200)))
    assert load_config("concentration", [*grid, f"N={N}"])
    one_line_error("concentration", [*grid, f"N={N}", f"seeds=[{seeds}]"], "200 clouds x", "seeds")


def test_a_config_copied_with_an_update_is_validated_again_before_anything_is_written(tmp_path):
    config = load_config("concentration-tiny")
    for update in ({"t_max": math.inf}, {"seed": -1}, {"weights": "no-such.npz"}):
        with pytest.raises(ConfigError, match=next(iter(update))):
            run_experiment(config.model_copy(update=update), tmp_path / "out")
        assert not (tmp_path / "out").exists()


def test_a_device_that_is_not_there_is_refused_before_anything_is_written(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    config = load_config("concentration-tiny", ["device=cuda"])  # a config may name a GPU elsewhere
    with pytest.raises(ConfigError, match="device 'cuda' is not available: torch sees no CUDA GPU"):
        run_experiment(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_new_run_that_fails_before_a_part_leaves_nothing(tmp_path, monkeypatch):
    from attnflow.experiments.concentration import experiment

    def fail(*args, **kwargs):
        raise RuntimeError("the run fails at its start")

    config = load_config("concentration-tiny", ["N=8", "n_keep=2", "betas=[10.0]"])
    with monkeypatch.context() as m:
        m.setattr(experiment, "concentration_inputs", fail)
        with pytest.raises(RuntimeError, match="at its start"):
            run_experiment(config, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # once a part is finished, the run's folder stays (a rerun resumes from it)
    with monkeypatch.context() as m:
        m.setattr(experiment, "assemble", fail)
        with pytest.raises(RuntimeError):
            run_experiment(config, tmp_path / "out")
    assert (tmp_path / "out" / "config.toml").is_file()
    assert any((tmp_path / "out" / "parts").glob("*.zarr"))
    assert run_experiment(config, tmp_path / "out").sizes["beta"] == 1


def test_tiny_presets_raise_no_warning_about_themselves():
    from attnflow.experiments import PRESETS

    tiny = [name for name in PRESETS if name.endswith("-tiny") or name.endswith("-demo")]
    assert {"concentration-tiny", "resolution-tiny", "terminal-tiny", "concentration-demo"} <= set(tiny)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in tiny:
            load_config(name)


def test_a_config_warning_comes_after_the_config_is_valid():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(ConfigError, match="d = 1"):
            load_config("concentration-tiny", ["t_max=2.0", "weights=random", "d=1"])
    assert not seen
    with pytest.warns(ConfigWarning, match=r"t_max = 2 is shorter than ln\(beta\)"):
        load_config("concentration-tiny", ["t_max=2.0"])


# ------------------------------------------------------------------------------ property test

#: the experiments whose every key is drawn (heads: all but the checkpoint and its text)
PROBED = ("concentration", "terminal", "zero-temperature", "layers", "heads")
SKIPPED = {"experiment", "checkpoint", "text"}


def _nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


BAD_VALUES = st.one_of(
    st.sampled_from(
        [
            *(math.inf, -math.inf, math.nan, 1e300, -1e300, 1e-300, 0.0, -1.0, 0, -1),
            *(2**63, 10**30, -(10**30), True, False, "", "x", "inf"),
            *([], [0], [-1.0], [math.inf], [1e300], [[1.0]], {"a": 1}),
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(alphabet="abcxyz019.-_/", max_size=6),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=3),
    st.integers(min_value=2, max_value=40).map(_nested),
)


def _toml(v) -> str:
    """v as the TOML literal `--set key=...` takes."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + "}"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return str(v)


def _numbers(v):
    if isinstance(v, dict):
        v = list(v.values())
    if isinstance(v, list | tuple):
        for x in v:
            yield from _numbers(x)
    elif isinstance(v, float):
        yield v


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(PROBED), data=st.data())
def test_any_value_of_any_key_makes_a_config_or_a_one_line_error_naming_the_key(name, data):
    Config = get_experiment(name).Config
    key = data.draw(st.sampled_from(sorted(set(Config.model_fields) - SKIPPED)), label="key")
    value = data.draw(BAD_VALUES, label="value")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", ConfigWarning)  # (a valid config that may mislead)
        try:
            config = load_config(name, [f"{key}={_toml(value)}"])
        except ConfigError as err:
            message = str(err)
            assert "\n" not in message and len(message) < 800, message
            assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(key)}(?![A-Za-z0-9_])", message), message
            return
    assert isinstance(config, Config)
    assert all(math.isfinite(x) for x in _numbers(config.model_dump()))


def test_windows_and_depths_that_cannot_run_are_refused():
    """A rate window must end on saved times (it failed after the run, in local_rates); the layers'
    depth must leave the Euler error above round-off (T = 1e-50 failed in the reference's first step)."""
    one_line_error("zero-temperature-tiny", ["rate_window=0.3"], "rate_window = 0.3 must be a multiple")
    one_line_error("zero-temperature-tiny", ["rate_window=1e-300"], "e.g. rate_window = 0.25")
    one_line_error("zero-temperature-tiny", ["rate_window=100"], "e.g. rate_window = 10")
    assert load_config("zero-temperature-tiny", ["rate_window=0.5"]).rate_window == 0.5
    one_line_error("layers-tiny", ["T=1e-50"], "T: Input should be greater than or equal to 0.001")


def test_the_reference_s_local_rates_fit_any_time_grid():
    """concentration with the N = infinity reference and dt_save = 0.3 (4 is no multiple of it): its
    windows are 3.9 wide, on the saved times."""
    config = load_config(
        "concentration-tiny", ["zero_reference=true", "dt_save=0.3", "N=8", "n_keep=2", "betas=[10.0]"]
    )
    rates = json.loads(run_experiment(config).attrs["zero"])["local_rates"]
    assert rates and all(abs((w["window"][1] - w["window"][0]) - 3.9) < 1e-9 for w in rates)


@pytest.mark.filterwarnings("ignore:t_max = :attnflow.experiments.config.ConfigWarning")  # short on purpose
def test_inverse_temperatures_whose_scores_leave_the_arithmetic_are_refused():
    """beta ||B|| must be a number in the run's dtype (beta = 1e308 made the state NaN at once)."""
    one_line_error("concentration-tiny", ["betas=[10.0, 1e308]"], "betas: beta = 1e+308 with ||B|| = 3")
    one_line_error("layers-tiny", ["beta=1e308"], "beta: beta = 1e+308", "use beta <= 3.33e+299")
    float32 = ["dtype=float32", "betas=[1e40]"]
    one_line_error("terminal-tiny", float32, "beyond what float32 computes with (1e+36)")
    ds = run_experiment(load_config("concentration-tiny", ["betas=[1e299]", "N=8", "n_keep=2"]))
    assert np.all(np.isfinite(ds.w2.values))


def test_a_concentration_run_that_keeps_no_token():
    ds = run_experiment(load_config("concentration-tiny", ["N=8", "n_keep=0", "betas=[10.0]"]))
    assert ds.sizes["token"] == 0 and ds.x_zero.shape == (ds.sizes["time"], 0, 2)
