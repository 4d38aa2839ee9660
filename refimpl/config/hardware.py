"""Hardware the stack runs on, or is modelled on: SRAM budget, memory, bandwidth, FLOP/s.

`cpu-local` is this machine: the cache sizes come from the operating system, and bandwidth and
FLOP/s from a short probe (`refimpl.config.probe`) cached on disk. The GPU presets are
spec-sheet figures for analytic what-if runs: nothing is measured for them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from refimpl.config._validate import positive_int, positive_real
from refimpl.errors import ConfigError

__all__ = ["HARDWARE_PRESETS", "HardwareSpec"]


@dataclass(frozen=True)
class HardwareSpec:
    """A device's capacities; the SRAM budget is what tiled kernels must fit into."""

    name: str
    sram_bytes: int  # S: simulated on-chip memory a kernel tile may use
    memory_bytes: int  # main memory ("HBM") capacity
    memory_bandwidth_bytes_s: float  # main-memory read bandwidth
    peak_flops: float  # dense peak for the kernels' dtype (fp32 on the CPU, bf16 on GPUs)
    host_bandwidth_bytes_s: float  # to a slower tier (CPU RAM over PCIe, for KV spills)
    analytic: bool  # True: spec-sheet figures, never measured here
    source: str  # where the figures come from

    def __post_init__(self) -> None:
        positive_int("sram_bytes", self.sram_bytes)
        positive_int("memory_bytes", self.memory_bytes)
        positive_real("memory_bandwidth_bytes_s", self.memory_bandwidth_bytes_s)
        positive_real("peak_flops", self.peak_flops)
        positive_real("host_bandwidth_bytes_s", self.host_bandwidth_bytes_s)

    @classmethod
    def preset(cls, name: str, *, remeasure: bool = False) -> HardwareSpec:
        """The preset `name`; `cpu-local` probes this machine once, or again if `remeasure`."""
        if name == "cpu-local":
            from refimpl.config.probe import local_cpu_spec

            return local_cpu_spec(remeasure=remeasure)
        if name not in HARDWARE_PRESETS:
            raise ConfigError("hardware", name, "unknown hardware preset", choices=preset_names())
        return HARDWARE_PRESETS[name]

    def with_sram_budget(self, sram_bytes: int) -> HardwareSpec:
        """The same hardware with another SRAM budget `S`."""
        return replace(self, sram_bytes=sram_bytes)

    @property
    def ridge_intensity(self) -> float:
        """FLOPs per byte above which a kernel is compute-bound (the roofline's ridge point)."""
        return self.peak_flops / self.memory_bandwidth_bytes_s


GB = 10**9
GiB = 2**30
KiB = 2**10

# Spec-sheet figures. A100: NVIDIA A100 Tensor Core GPU datasheet (80GB SXM: 2,039 GB/s HBM2e,
# 312 TFLOP/s dense BF16, PCIe Gen4 64 GB/s) and the NVIDIA Ampere tuning guide (up to 164 KB
# shared memory per SM). H100: NVIDIA H100 Tensor Core GPU datasheet (SXM5: 3.35 TB/s HBM3,
# 989 TFLOP/s dense BF16, PCIe Gen5 128 GB/s) and the Hopper tuning guide (up to 228 KB shared
# memory per SM). PCIe figures are both directions together; one direction is half.
HARDWARE_PRESETS: dict[str, HardwareSpec] = {
    "a100-80gb": HardwareSpec(
        name="a100-80gb",
        sram_bytes=164 * KiB,
        memory_bytes=80 * GiB,
        memory_bandwidth_bytes_s=2039 * GB,
        peak_flops=312e12,
        host_bandwidth_bytes_s=32 * GB,
        analytic=True,
        source="NVIDIA A100 datasheet and Ampere tuning guide (spec sheet, analytic)",
    ),
    "h100-sxm": HardwareSpec(
        name="h100-sxm",
        sram_bytes=228 * KiB,
        memory_bytes=80 * GiB,
        memory_bandwidth_bytes_s=3350 * GB,
        peak_flops=989e12,
        host_bandwidth_bytes_s=64 * GB,
        analytic=True,
        source="NVIDIA H100 datasheet and Hopper tuning guide (spec sheet, analytic)",
    ),
}


def preset_names() -> tuple[str, ...]:
    """All hardware preset names, `cpu-local` first."""
    return ("cpu-local", *HARDWARE_PRESETS)
