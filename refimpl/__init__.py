"""refimpl: a measured reference implementation of an SLA-aware LLM serving stack on the CPU.

The public API is what this module names; notebooks, exercises and scripts use only it.
Importing refimpl is cheap: configs and errors load at once, everything that needs Numba
(kernels, the KV pool, the engine) loads on first use, and nothing is compiled.

    import refimpl
    result = refimpl.simulate("azure-conv-like", "sarathi", model="llama-3-8b",
                              hardware="h100-sxm", num_requests=500)
    result.summary()["ttft_p95_s"]
    real = refimpl.run("azure-conv-like", "vllm", model="tiny", num_requests=50,
                       compare_sim=True)   # a real Llama model on this CPU
    real.fidelity["latency"]["ttft_p95_s"]
    table = refimpl.sweep({"policies": ["slo", "vllm"], "rates": [10, 20]}, "out").table
    refimpl.capacity({"policies": ["slo", "vllm"]}, "out").rows  # highest rate at 90% SLOs
"""

from __future__ import annotations

from refimpl import errors
from refimpl._lazy import lazy_getattr
from refimpl._version import __version__
from refimpl.config import SLO, HardwareSpec, ModelConfig, PriorityClass
from refimpl.errors import RefimplError

# Public names whose modules import Numba or the whole engine: loaded when first used.
_LAZY = {
    "simulate": "refimpl.engine",
    "SimulationResult": "refimpl.engine",
    "run": "refimpl.engine",
    "RunResult": "refimpl.engine",
    "LlamaConfig": "refimpl.model",
    "LlamaModel": "refimpl.model",
    "LlamaWeights": "refimpl.model",
    "Request": "refimpl.sched",
    "StepPlan": "refimpl.sched",
    "Policy": "refimpl.sched",
    "PolicyContext": "refimpl.sched",
    "Gate": "refimpl.admission",
    "make_policy": "refimpl.sched",
    "POLICIES": "refimpl.sched",
    "PagePool": "refimpl.kv",
    "Workload": "refimpl.workloads",
    "make_workload": "refimpl.workloads",
    "synthetic": "refimpl.workloads",
    "load_trace": "refimpl.workloads",
    "summarize": "refimpl.metrics",
    "sweep": "refimpl.sweeps",
    "capacity": "refimpl.sweeps",
    "SweepGrid": "refimpl.sweeps",
    "export_requests": "refimpl.export",
    "export_steps": "refimpl.export",
    "perfetto_trace": "refimpl.export",
}

__all__ = [
    "SLO",
    "HardwareSpec",
    "ModelConfig",
    "PriorityClass",
    "RefimplError",
    "__version__",
    "errors",
    *_LAZY,
]


__getattr__ = lazy_getattr(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted(__all__)
