"""Input checks shared by the kernel wrappers, run before any kernel sees the arrays.

Compiled kernels do not check bounds, so a bad page id or a NaN would become a crash or a
silently wrong answer inside them. Each check raises `KernelInputError` naming the argument,
the offending field and its value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from refimpl.errors import KernelInputError

__all__ = [
    "check_choice",
    "check_finite",
    "check_heads",
    "check_same",
    "check_scores_fit",
    "float_array",
    "index_array",
    "positive_int",
]


def _array(name: str, x: object, ndim: int) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise KernelInputError(f"{name} type", type(x).__name__, "must be a numpy array")
    if x.ndim != ndim:
        raise KernelInputError(f"{name}.ndim", x.ndim, f"must be {ndim} (shape {x.shape})")
    if 0 in x.shape:
        raise KernelInputError(f"{name}.shape", x.shape, "has an empty dimension")
    return x


def float_array(name: str, x: object, ndim: int) -> np.ndarray:
    """`x` as a C-contiguous float32 array of rank `ndim` (copied only if not contiguous)."""
    x = _array(name, x, ndim)
    if x.dtype != np.float32:
        raise KernelInputError(f"{name}.dtype", str(x.dtype), "must be float32")
    return np.ascontiguousarray(x)


def index_array(name: str, x: object, ndim: int) -> np.ndarray:
    """`x` as a C-contiguous int32 array of rank `ndim`; any integer dtype is accepted."""
    x = np.asarray(x) if isinstance(x, (list, tuple)) else x
    x = _array(name, x, ndim)
    if not np.issubdtype(x.dtype, np.integer):
        raise KernelInputError(f"{name}.dtype", str(x.dtype), "must be an integer type")
    if x.size and (x.min() < np.iinfo(np.int32).min or x.max() > np.iinfo(np.int32).max):
        raise KernelInputError(name, f"[{x.min()}, {x.max()}]", "outside the int32 range")
    return np.ascontiguousarray(x, dtype=np.int32)


def positive_int(name: str, value: object) -> int:
    """`value` as an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise KernelInputError(name, value, "must be an integer >= 1")
    return int(value)


def check_choice(name: str, value: object, choices: Sequence[object]) -> None:
    """`value` must be one of `choices`."""
    if value not in choices:
        raise KernelInputError(name, value, "unknown choice", choices=choices)


def check_finite(name: str, x: np.ndarray) -> None:
    """No NaN or infinity anywhere in `x`."""
    finite = np.isfinite(x)
    if not finite.all():
        index = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise KernelInputError(f"{name}[{', '.join(map(str, index))}]", float(x[index]),
                               "must be finite (NaN or infinity found)")


FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_scores_fit(q_max: float, k_max: float, v_max: float, head_dim: int,
                     num_keys: int) -> None:
    """Magnitudes whose float32 scores and sums cannot overflow (an infinite score turns the
    online softmax's `s - max` into NaN, where the float64 oracle stays finite)."""
    # Cauchy-Schwarz: |q.k| / sqrt(d) <= sqrt(d) max|q| max|k|, partial sums included.
    if math.sqrt(head_dim) * q_max * k_max > FLOAT32_MAX:
        name, value = ("q", q_max) if q_max >= k_max else ("k", k_max)
        raise KernelInputError(f"max |{name}|", value, f"too large: a score q.k/sqrt(d) could "
                               f"overflow float32 (sqrt({head_dim}) * {q_max:.3g} * "
                               f"{k_max:.3g} > {FLOAT32_MAX:.3g}); scale q or k down")
    # An output row sums at most num_keys rows of V, each weighted <= 1, before normalising.
    if num_keys * v_max > FLOAT32_MAX:
        raise KernelInputError("max |v|", v_max, f"too large: a sum over {num_keys} keys could "
                               f"overflow float32")


def check_same(name: str, value: int, other_name: str, other: int) -> None:
    """Two dimensions that must agree."""
    if value != other:
        raise KernelInputError(name, value, f"must equal {other_name}={other}")


def check_heads(q_name: str, num_q_heads: int, kv_name: str, num_kv_heads: int) -> None:
    """Grouped-query attention: each KV head serves the same number of query heads."""
    if num_q_heads % num_kv_heads:
        raise KernelInputError(kv_name, num_kv_heads,
                               f"must divide {q_name}={num_q_heads} (query heads per KV head)")
