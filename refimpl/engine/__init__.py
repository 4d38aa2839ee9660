"""The serving engine: one plan/run/commit loop, on a simulated clock or on real kernels."""

from refimpl.engine.engine import Engine, EngineRun
from refimpl.engine.executor import Executor, SimulatedExecutor
from refimpl.engine.simulate import SimulationResult, kv_pool_for, requests_from_workload, simulate

__all__ = [
    "Engine",
    "EngineRun",
    "Executor",
    "SimulatedExecutor",
    "SimulationResult",
    "kv_pool_for",
    "requests_from_workload",
    "simulate",
]
