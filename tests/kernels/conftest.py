"""Fixtures of the kernel tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def fresh_decisions():
    """Every test starts without kept decisions or plans (kernels.auto, kernels.reuse)."""
    from attnflow.kernels import auto

    auto.forget()
    yield
    auto.forget()
