"""Test setup for the kernel: the `gpu` marker (CUDA cases; `pytest -m gpu` runs only them)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (select with `pytest -m gpu`)")
