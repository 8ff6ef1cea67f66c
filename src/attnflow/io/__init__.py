"""Files: stores with checksums (`stores`), checksums of plain files (`files`), paths kept inside a
folder (`paths`), the JSON encoder and attrs (`encode`), provenance (`provenance`), arrays from files
and the digest of an input file's content (`arrays`) and the one-writer lock of a folder (`lock`).

Standard library, NumPy and `attnflow._checks` only at import; xarray, zarr and fsspec load inside
the functions that need them. May import the utilities; knows no experiment.
"""

from .arrays import ARRAY_SUFFIXES, content_digest, load_arrays, load_matrices, read_array
from .encode import clean_attrs, json_attr, to_json
from .files import (
    FILES_RECORD,
    file_problem,
    forget_files,
    read_checked_text,
    record_files,
    record_run,
    recorded_files,
    recorded_run,
    write_checked_text,
)
from .paths import OutsideFolderError, inside, link_out
from .provenance import provenance
from .stores import (
    CHECKSUM_FILE,
    CHECKSUM_FORMAT,
    StoreError,
    atomic_write_text,
    clean_stale,
    dataset_problems,
    is_leftover,
    read_dataset,
    read_layout,
    store_fingerprint,
    verify_dataset,
    write_checksums,
    write_dataset,
)

__all__ = [
    "ARRAY_SUFFIXES",
    "CHECKSUM_FILE",
    "CHECKSUM_FORMAT",
    "FILES_RECORD",
    "OutsideFolderError",
    "StoreError",
    "atomic_write_text",
    "clean_attrs",
    "clean_stale",
    "content_digest",
    "dataset_problems",
    "file_problem",
    "forget_files",
    "inside",
    "is_leftover",
    "json_attr",
    "link_out",
    "load_arrays",
    "load_matrices",
    "provenance",
    "read_array",
    "read_checked_text",
    "read_dataset",
    "read_layout",
    "record_files",
    "record_run",
    "recorded_files",
    "recorded_run",
    "store_fingerprint",
    "to_json",
    "verify_dataset",
    "write_checked_text",
    "write_checksums",
    "write_dataset",
]
