"""Element types of weights and KV pages, and their size in bytes."""

from __future__ import annotations

from refimpl.errors import ConfigError

# Bytes per element. int8 and fp8_e4m3 pages also carry scales, counted by the KV cache.
DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int8": 1,
    "fp8_e4m3": 1,
}


def dtype_bytes(dtype: str, field: str = "dtype") -> int:
    """Bytes per element of `dtype`; a `ConfigError` naming `field` if it is unknown."""
    try:
        return DTYPE_BYTES[dtype]
    except (KeyError, TypeError):
        raise ConfigError(field, dtype, "unknown dtype", choices=DTYPE_BYTES) from None
