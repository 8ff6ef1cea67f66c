"""Files: stores with checksums (`stores`), the JSON encoder and attrs (`encode`), provenance
(`provenance`), arrays from files (`arrays`) and the one-writer lock of a folder (`lock`).

Standard library, NumPy and `attnflow._checks` only at import; xarray, zarr and fsspec load inside
the functions that need them. May import the utilities; knows no experiment.
"""

from .arrays import ARRAY_SUFFIXES, load_matrices, read_array
from .encode import clean_attrs, json_attr, to_json
from .provenance import provenance
from .stores import (
    CHECKSUM_FILE,
    CHECKSUM_FORMAT,
    StoreError,
    atomic_write_text,
    clean_stale,
    dataset_problems,
    read_dataset,
    verify_dataset,
    write_checksums,
    write_dataset,
)

__all__ = [
    "ARRAY_SUFFIXES",
    "CHECKSUM_FILE",
    "CHECKSUM_FORMAT",
    "StoreError",
    "atomic_write_text",
    "clean_attrs",
    "clean_stale",
    "dataset_problems",
    "json_attr",
    "load_matrices",
    "provenance",
    "read_array",
    "read_dataset",
    "to_json",
    "verify_dataset",
    "write_checksums",
    "write_dataset",
]
