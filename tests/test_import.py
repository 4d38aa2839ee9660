"""`import refimpl` is cheap and side-effect free; the public API names what it promises."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

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


def test_no_test_folder_stands_in_for_an_installed_package_of_its_name():
    # Hugging Face's transformers imports a package called `kernels`; while tests/kernels was a
    # top-level name of its own in a pytest run, that import found our test folder and failed.
    tests_dir = Path(__file__).parent
    for folder in sorted(p for p in tests_dir.iterdir() if (p / "__init__.py").exists()):
        spec = importlib.util.find_spec(folder.name)
        if spec is not None and spec.origin is not None:
            assert not Path(spec.origin).is_relative_to(tests_dir), (
                f"`import {folder.name}` finds the test folder {folder}")
