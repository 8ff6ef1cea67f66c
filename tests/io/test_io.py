"""attnflow.io: atomic zarr stores and text files, provenance, JSON helpers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import xarray as xr

from attnflow.io import (
    StoreError,
    atomic_write_text,
    clean_stale,
    provenance,
    read_dataset,
    read_layout,
    to_json,
    write_dataset,
)


def _ds(scale: float = 1.0) -> xr.Dataset:
    return xr.Dataset(
        {
            "w2": (("beta", "time"), scale * np.arange(6.0).reshape(2, 3)),
            "x": (("beta", "token", "dim"), np.ones((2, 4, 3), dtype=np.float32)),
            "converged": (("beta",), np.array([True, False])),
        },
        coords={"beta": [10.0, 100.0], "time": [0.0, 0.5, 1.0]},
        attrs={"experiment": "concentration", "config": to_json({"N": 3}), "seed": 0, "betas": [10.0, 100.0]},
    )


def _leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_roundtrip_with_plain_open_zarr(tmp_path):
    path = write_dataset(_ds(), tmp_path / "r.zarr")
    with xr.open_zarr(path) as back:  # what users do in a notebook
        xr.testing.assert_identical(back.load(), _ds())
        assert back["x"].dtype == np.float32
        assert json.loads(back.attrs["config"]) == {"N": 3}
    xr.testing.assert_identical(read_dataset(path), _ds())
    assert _leftovers(tmp_path) == []


def test_dict_attrs_are_stored_as_json_and_objects_rejected(tmp_path):
    ds = _ds()
    ds.attrs["fits"] = {"a": 1.5, "b": [1, 2]}
    back = read_dataset(write_dataset(ds, tmp_path / "r.zarr"))
    assert json.loads(back.attrs["fits"]) == {"a": 1.5, "b": [1, 2]}
    ds.attrs["bad"] = object()
    with pytest.raises(TypeError, match="'bad'"):
        write_dataset(ds, tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()


def test_layout_from_metadata_is_xarrays(tmp_path):
    """read_layout (no xarray) gives xarray's sizes, data variables (in order) and attrs, with a
    dimension without coordinate, a non-index coordinate and a variable sorting before the others."""
    ds = _ds()
    ds["A_first"] = (("k",), np.zeros(2))
    ds = ds.assign_coords(label=("beta", ["low", "high"]))
    path = write_dataset(ds, tmp_path / "r.zarr")
    layout = read_layout(path)
    with xr.open_zarr(path, chunks=None) as back:
        assert list(layout["sizes"].items()) == list(back.sizes.items())
        assert layout["variables"] == list(back.data_vars)
        assert layout["attrs"] == back.attrs
    assert "label" not in layout["variables"] and layout["sizes"]["k"] == 2


def test_layout_refuses_a_damaged_store(tmp_path):
    path = write_dataset(_ds(), tmp_path / "r.zarr")
    (path / ".zmetadata").write_text("{}")
    with pytest.raises(StoreError, match=r"\.zmetadata: 2 bytes, written with"):
        read_layout(path)
    with pytest.raises(StoreError, match=r"\.zmetadata: cannot be read"):
        read_layout(path, verify=False)
    meta = {"metadata": {"x/.zarray": {"shape": [2, 3]}, "x/.zattrs": {"_ARRAY_DIMENSIONS": ["a"]}}}
    (path / ".zmetadata").write_text(json.dumps(meta))  # two lengths, one dimension name
    with pytest.raises(StoreError, match=r"\.zmetadata: cannot be read \(ValueError"):
        read_layout(path, verify=False)


def test_overwrite_replaces_the_store(tmp_path):
    path = tmp_path / "r.zarr"
    write_dataset(_ds(1.0), path)
    write_dataset(_ds(2.0), path)
    np.testing.assert_array_equal(read_dataset(path).w2.values, 2.0 * np.arange(6.0).reshape(2, 3))
    assert _leftovers(tmp_path) == []


def test_failed_write_never_leaves_a_half_written_store(tmp_path, monkeypatch):
    path = tmp_path / "r.zarr"
    write_dataset(_ds(1.0), path)
    real = xr.Dataset.to_zarr

    def crash_midway(self, store, **kwargs):
        real(self[["w2"]], store, **kwargs)  # part of the store is on disk...
        raise OSError("disk full")  # ...when the write dies

    monkeypatch.setattr(xr.Dataset, "to_zarr", crash_midway)
    with pytest.raises(OSError, match="disk full"):
        write_dataset(_ds(2.0), path)
    with pytest.raises(OSError, match="disk full"):
        write_dataset(_ds(2.0), tmp_path / "new.zarr")
    monkeypatch.undo()
    xr.testing.assert_identical(read_dataset(path), _ds(1.0))  # the old store, intact
    assert not (tmp_path / "new.zarr").exists()  # no store at all rather than half of one
    assert _leftovers(tmp_path) == []


def test_write_dataset_rejects_non_datasets(tmp_path):
    with pytest.raises(TypeError, match=r"xarray\.Dataset"):
        write_dataset({"w2": [1, 2]}, tmp_path / "r.zarr")


def test_read_missing_store_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothere\.zarr"):
        read_dataset(tmp_path / "nothere.zarr")


def test_atomic_write_text(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "summary.json"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert path.read_text() == "two"

    def broken_fsync(fd):
        raise OSError("io error")

    monkeypatch.setattr("attnflow.io.stores.os.fsync", broken_fsync)
    with pytest.raises(OSError):
        atomic_write_text(path, "three")
    assert path.read_text() == "two"
    assert _leftovers(path.parent) == []


def test_clean_stale_removes_only_temporaries(tmp_path):
    (tmp_path / ".r.zarr.tmp-1234abcd").mkdir()
    (tmp_path / ".summary.json.tmp-1234abcd").write_text("x")
    (tmp_path / "keep.zarr").mkdir()
    (tmp_path / ".hidden").write_text("x")
    assert clean_stale(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "keep.zarr"]


def test_provenance_is_json_and_names_versions():
    p = provenance()
    json.dumps(p)
    assert p["versions"]["numpy"] == np.__version__
    assert p["versions"]["xarray"] == xr.__version__
    assert {"python", "host", "time_utc", "cpu_count"} <= set(p)


def test_to_json_handles_numpy_and_nan():
    text = to_json({"a": np.float64(1.5), "b": np.arange(2), "c": math.nan, "d": [np.inf, 1]})
    assert json.loads(text) == {"a": 1.5, "b": [0, 1], "c": None, "d": [None, 1]}
