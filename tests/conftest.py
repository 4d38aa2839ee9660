"""Shared test set-up: Numba's cache outside the repository, and the public traces fixture.

Numba compiles each kernel once per machine; pointing `NUMBA_CACHE_DIR` at one shared folder
(unless CI already did) lets every test process reuse the compiled kernels instead of writing
`__pycache__` files into the checkout.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(tempfile.gettempdir()) / "refimpl-numba-cache"))

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRACES = Path(os.environ.get("REFIMPL_TRACES", SHARED / "traces"))


@pytest.fixture
def traces_dir() -> Path:
    """The folder of public traces; tests that need it skip cleanly when it is absent."""
    if not TRACES.is_dir():
        pytest.skip(f"public traces not found at {TRACES} (set REFIMPL_TRACES)")
    return TRACES
