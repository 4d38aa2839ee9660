"""`import refimpl` is cheap and side-effect free; the public API names what it promises."""

from __future__ import annotations

import subprocess
import sys

import refimpl


def test_public_api_names_the_promised_interfaces():
    for name in ("ModelConfig", "HardwareSpec", "SLO", "RefimplError", "__version__"):
        assert name in refimpl.__all__
        assert hasattr(refimpl, name)
    assert issubclass(refimpl.errors.RefimplError, ValueError)


def test_import_neither_imports_numba_nor_compiles():
    code = "import sys, refimpl; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
