"""Configuration as data: model shapes, hardware capacities, latency targets and SLO sets."""

from refimpl.config.dtypes import DTYPE_BYTES, dtype_bytes
from refimpl.config.hardware import HARDWARE_PRESETS, HardwareSpec, preset_names
from refimpl.config.model import MODEL_PRESETS, ModelConfig
from refimpl.config.slo import SLO, SLO_PRESETS, PriorityClass
from refimpl.config.slo_sets import SLO_SETS, SLOSet, one_class, slo_set

__all__ = [
    "DTYPE_BYTES",
    "HARDWARE_PRESETS",
    "MODEL_PRESETS",
    "SLO",
    "SLO_PRESETS",
    "SLO_SETS",
    "HardwareSpec",
    "ModelConfig",
    "PriorityClass",
    "SLOSet",
    "dtype_bytes",
    "one_class",
    "preset_names",
    "slo_set",
]
