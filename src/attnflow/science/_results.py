"""The result records of the fits: small frozen dataclasses with `.to_dict()` (NumPy values made
plain Python, for JSON)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np


def _plain(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class Result:
    """A fit's result record: `.to_dict()` gives its fields as plain Python values."""

    def to_dict(self) -> dict[str, object]:
        return {k: _plain(v) for k, v in asdict(self).items()}  # type: ignore[call-overload]
