"""`import refimpl` is cheap and side-effect free; the public API names what it promises."""

from __future__ import annotations

import subprocess
import sys

import refimpl


def test_public_api_names_the_promised_interfaces():
    for name in ("ModelConfig", "HardwareSpec", "SLO", "Request", "simulate", "RefimplError",
                 "__version__"):
        assert name in refimpl.__all__
    for name in refimpl.__all__:  # every promised name resolves (lazy ones on first use)
        assert getattr(refimpl, name) is not None
    assert issubclass(refimpl.errors.RefimplError, ValueError)
    assert refimpl.ModelConfig.preset("tiny").kv_bytes_per_token() == 4096


def test_import_neither_imports_numba_nor_compiles():
    code = "import sys, refimpl; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
