"""Loading a learner's solution file as a module, with a clear error when it will not load.

The file is imported under a fresh module name (so a starter and a reference never collide)
and registered in `sys.modules` before it runs, which `dataclasses` and `pickle` need. Its
folder goes at the end of `sys.path`, so it may import helper modules kept beside it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

__all__ = ["SOLUTION_ENV", "SolutionLoadError", "load_solution"]

SOLUTION_ENV = "REFIMPL_SOLUTION"  # the solution file `refimpl grade` hands to the tests


class SolutionLoadError(Exception):
    """The solution file is missing or raised while it was being imported."""


def load_solution(path: str | os.PathLike[str], exercise: str) -> ModuleType:
    """Import the Python file at `path` as the solution module of `exercise`."""
    path = Path(path)
    if not path.is_file():
        raise SolutionLoadError(f"solution file not found: {path}")
    name = f"refimpl_solution_{exercise}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None  # always set for a .py path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # a syntax error, a time limit, exit() at import time
        # Re-raised as an `Exception`: pytest caches those for a module-scoped fixture, so
        # every later test fails with this message, but not `BaseException`s.
        del sys.modules[name]
        where = traceback.extract_tb(error.__traceback__)[-1:] or None
        line = f" (line {where[0].lineno})" if where and where[0].filename == str(path) else ""
        raise SolutionLoadError(
            f"could not load {path.name}{line}: {type(error).__name__}: {error}"
        ) from error
    return module
