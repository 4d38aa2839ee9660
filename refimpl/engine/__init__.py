"""The serving engine: one compiled loop (gate, plan, execute, commit), on a simulated clock
(`simulate`) or on a real model executed by refimpl's kernels (`run`)."""

from refimpl.engine.compile_loop import loop_ready, prepare_loop, warm_up
from refimpl.engine.dispatch import plan_once
from refimpl.engine.engine import Engine, EngineRun
from refimpl.engine.executor import SimulatedExecutor
from refimpl.engine.model_executor import ModelExecutor, Slowdown
from refimpl.engine.run import RunResult, run
from refimpl.engine.simulate import SimulationResult, kv_pool_for, requests_from_workload, simulate

__all__ = [
    "Engine",
    "EngineRun",
    "ModelExecutor",
    "RunResult",
    "SimulatedExecutor",
    "SimulationResult",
    "Slowdown",
    "kv_pool_for",
    "loop_ready",
    "plan_once",
    "prepare_loop",
    "requests_from_workload",
    "run",
    "simulate",
    "warm_up",
]
