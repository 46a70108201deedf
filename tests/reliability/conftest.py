"""The standing reliability suite: attacks, tampering, races, faults and fuzzing, with bounded loops.

Each test reports how many cases it tried and how many failed through the `record` fixture; when
HUBKERNELS_RELIABILITY_LOG names a file, every record is appended there as one JSON line, which
`scripts/reliability.py` turns into the table of RELIABILITY.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import pytest


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Callable[..., None]:
    """`record(cases, failures=0, seed=None, **figures)`: what this test tried, for the reliability table."""

    def _record(cases: int, failures: int = 0, seed: int | None = None, **figures: object) -> None:
        path = os.environ.get("HUBKERNELS_RELIABILITY_LOG")
        if not path:
            return
        line = {"test": request.node.nodeid, "cases": cases, "failures": failures, "seed": seed, **figures}
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    return _record
