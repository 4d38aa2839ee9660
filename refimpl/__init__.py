"""refimpl: a measured reference implementation of an SLA-aware LLM serving stack on the CPU.

The public API is what this module names; notebooks, exercises and scripts use only it.
Importing refimpl is cheap: it neither imports Numba nor compiles anything.
"""

from refimpl import errors
from refimpl._version import __version__
from refimpl.config import SLO, HardwareSpec, ModelConfig, PriorityClass
from refimpl.errors import RefimplError

__all__ = [
    "SLO",
    "HardwareSpec",
    "ModelConfig",
    "PriorityClass",
    "RefimplError",
    "__version__",
    "errors",
]
