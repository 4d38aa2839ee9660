"""Configuration as data: model shapes, hardware capacities and latency targets."""

from refimpl.config.dtypes import DTYPE_BYTES, dtype_bytes
from refimpl.config.hardware import HARDWARE_PRESETS, HardwareSpec, preset_names
from refimpl.config.model import MODEL_PRESETS, ModelConfig
from refimpl.config.slo import SLO, SLO_PRESETS, PriorityClass

__all__ = [
    "DTYPE_BYTES",
    "HARDWARE_PRESETS",
    "MODEL_PRESETS",
    "SLO",
    "SLO_PRESETS",
    "HardwareSpec",
    "ModelConfig",
    "PriorityClass",
    "dtype_bytes",
    "preset_names",
]
