"""Names a package exports but loads on first use (PEP 562), so importing it stays cheap."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, modules: Mapping[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` that imports `modules[name]` (absolute, or relative to
    `package` when it starts with '.') the first time `name` is asked for, and keeps it in
    the package, so later look-ups (`refimpl.StepPlan` in a policy's every step) are plain
    attribute reads, not an import each."""

    def __getattr__(name: str) -> object:
        if name in modules:
            value = getattr(importlib.import_module(modules[name], package), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
