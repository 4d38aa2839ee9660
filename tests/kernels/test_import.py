"""Importing the kernels compiles nothing; importing refimpl does not even import Numba."""

from __future__ import annotations

import subprocess
import sys

_CHECK = """
import sys
import refimpl
assert "numba" not in sys.modules, "import refimpl imported numba"
from refimpl.kernels import _paged, _prefill, _tile
for pair in (_prefill.prefill_kernel, _paged.paged_kernel):
    for fn in (pair.serial, pair.parallel):
        assert not fn.signatures, fn
for fn in (_tile.attend_tile, _tile.load_queries, _paged.load_kv_pages):
    assert not fn.signatures, fn
"""


def test_importing_the_kernels_compiles_nothing():
    subprocess.run([sys.executable, "-c", _CHECK], check=True)
