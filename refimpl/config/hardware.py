"""Hardware the stack runs on, or is modelled on: SRAM budget, memory, bandwidth, FLOP/s.

`cpu-local` is this machine: the cache sizes come from the operating system, and bandwidth and
FLOP/s from a short probe (`refimpl.config.probe`) cached on disk. The GPU presets are
spec-sheet figures for analytic what-if runs, with the efficiencies fitted to Vidur's measured
operator profiles (refimpl.config.efficiency); `<gpu>-x2/-x4/-x8` are one node of 2, 4 or 8
such GPUs serving one model with tensor parallelism (per-GPU figures, `num_gpus` of them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from refimpl.config._validate import positive_int, positive_real
from refimpl.config.efficiency import Efficiency, GemmFit, LinkFit, OpFit
from refimpl.config.probe import local_machine
from refimpl.errors import ConfigError

__all__ = ["HARDWARE_PRESETS", "HardwareSpec", "local_cpu_spec", "preset_names"]


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
    num_gpus: int = 1  # tensor-parallel GPUs; the other figures are each one's
    efficiency: Efficiency | None = None  # fitted operator efficiencies, where measured

    def __post_init__(self) -> None:
        positive_int("num_gpus", self.num_gpus)
        positive_int("sram_bytes", self.sram_bytes)
        positive_int("memory_bytes", self.memory_bytes)
        positive_real("memory_bandwidth_bytes_s", self.memory_bandwidth_bytes_s)
        positive_real("peak_flops", self.peak_flops)
        positive_real("host_bandwidth_bytes_s", self.host_bandwidth_bytes_s)

    @classmethod
    def preset(cls, name: str, *, remeasure: bool = False) -> HardwareSpec:
        """The preset `name`; `cpu-local` probes this machine once, or again if `remeasure`."""
        if name == "cpu-local":
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

# Fitted by `refimpl calibrate-gpu --profiles DIR` (refimpl.costmodel.gpu_fit) on every row
# of Vidur's profiles: A100 from Llama-2-7B, Llama-2-70B and Llama-3-8B; H100 from Llama-2-7B
# and Llama-2-70B; TP 1, 2, 4, 8. Fields in the order of GemmFit, OpFit and LinkFit.
_VIDUR = ("fitted to Vidur's profiles (microsoft/vidur, MIT, commit "
          "7d47513363ec447a741ac5e47241580b47724fbf, data/profiling)")
_A100 = Efficiency(
    gemm=GemmFit(5.106e-06, 0.7355, 0.9602, 0.01, 1.563, 64),
    norm=OpFit(2.452e-06, 0.5371, 1.36, 1.73e+07, 0.3571, 8.92e-11, 3.314e-09),
    rope=OpFit(2.382e-06, 0.5203, 1.548, 2.189e+07, 0.439, 8.92e-11, 3.314e-09),
    act=OpFit(1.355e-06, 0.9845, 1.142, 5.808e+06, 0.5322, 8.92e-11, 3.314e-09),
    add=OpFit(1.87e-06, 1.357, 1.009, 2.174e+07, 0.8297),
    emb=OpFit(3.967e-06, 0.1513, 1.501, 9.276e+07, 0.1352),
    all_reduce=(LinkFit(2, 3.584e-05, 1.584e+11), LinkFit(4, 2.874e-05, 1.026e+11),
                LinkFit(8, 3.898e-05, 8.683e+10)),
    source=_VIDUR,
)
_H100 = Efficiency(
    gemm=GemmFit(6.837e-06, 0.7517, 0.9326, 77.21, 20.0, 128),
    norm=OpFit(2.697e-06, 0.522, 1.809, 2.972e+07, 0.3261, 7.377e-11, 2.773e-09),
    rope=OpFit(1.558e-06, 0.6587, 1.301, 2.5e+07, 0.4806, 7.377e-11, 2.773e-09),
    act=OpFit(7.727e-07, 0.8537, 1.453, 9.945e+06, 0.6239, 7.377e-11, 2.773e-09),
    add=OpFit(1.336e-06, 1.398, 1, 2.396e+07, 0.969),
    emb=OpFit(2.81e-06, 0.1878, 1.113, 9.896e+06, 0.1823),
    all_reduce=(LinkFit(2, 1.662e-05, 2.821e+11), LinkFit(4, 3.061e-05, 2.53e+11),
                LinkFit(8, 2.858e-05, 1.937e+11)),
    source=_VIDUR,
)

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
        efficiency=_A100,
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
        efficiency=_H100,
    ),
}
# One node of 2, 4 or 8 GPUs (DGX A100 / DGX H100: NVSwitch, all-reduce figures fitted).
HARDWARE_PRESETS.update({
    f"{name}-x{n}": replace(spec, name=f"{name}-x{n}", num_gpus=n)
    for name, spec in list(HARDWARE_PRESETS.items()) for n in (2, 4, 8)
})


def preset_names() -> tuple[str, ...]:
    """All hardware preset names, `cpu-local` first."""
    return ("cpu-local", *HARDWARE_PRESETS)


def local_cpu_spec(*, remeasure: bool = False, save: bool = False) -> HardwareSpec:
    """`HardwareSpec` of this machine: L2 per core as the SRAM budget, probed speeds
    (refimpl.config.probe; `save` keeps the probe on disk, as only `refimpl info` does)."""
    local = local_machine(remeasure=remeasure, save=save)
    return HardwareSpec(
        name="cpu-local", sram_bytes=local.sram_bytes, memory_bytes=local.memory_bytes,
        memory_bandwidth_bytes_s=local.memory_bandwidth_bytes_s, peak_flops=local.peak_flops,
        host_bandwidth_bytes_s=local.host_bandwidth_bytes_s, analytic=False,
        source=local.source)
