"""The serving engine compiled with Numba: the built-in baselines over whole traces in seconds.

The same engine as refimpl.engine.engine, for the vllm, sarathi and prefill-first policies on
the roofline step model, with every decision computed per step. Cut one job per file:
`state` (requests, queues, pool and plan as arrays, and their helpers), `policies` (each
baseline's decision), `loop` (arrivals, step time, commit, records), `clock` (a clock Numba can
call), `engine` (the `Engine`-shaped wrapper). `simulate(..., engine="auto")` picks it when it
applies; tests/engine/test_compiled.py proves it equal to the Python engine.
"""

from refimpl.engine.compiled.engine import CompiledEngine, supports

__all__ = ["CompiledEngine", "supports"]
