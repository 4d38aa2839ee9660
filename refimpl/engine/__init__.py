"""The serving engine: one compiled loop (gate, plan, execute, commit), on a simulated clock."""

from refimpl.engine.dispatch import plan_once
from refimpl.engine.engine import Engine, EngineRun, loop_ready, warm_up
from refimpl.engine.executor import SimulatedExecutor
from refimpl.engine.simulate import SimulationResult, kv_pool_for, requests_from_workload, simulate

__all__ = [
    "Engine",
    "EngineRun",
    "SimulatedExecutor",
    "SimulationResult",
    "kv_pool_for",
    "loop_ready",
    "plan_once",
    "requests_from_workload",
    "simulate",
    "warm_up",
]
