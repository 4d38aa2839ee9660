"""Compiling the serving loop (or loading it from Numba's cache) before the first run.

The loop is one compiled function over every policy, gate and executor, so one tiny run
compiles it for all of them: about a minute and a half on a new machine, one core's work,
since Numba compiles a function's callees one after another while it types it. On a machine
with a second core and a cold cache, a helper process compiles the loop's two policy planners
meanwhile (`HELPER_CALLS`, from `loop.ahead_calls`), this process compiles the gate's and the
commit's calls (`OWN_CALLS`), and the loop, compiled last, loads the helper's builds from the
cache.
Either process failing costs time, never a result: whatever is not in the cache is compiled
where it is needed.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence

import numba

from refimpl.config.hardware import HardwareSpec
from refimpl.config.model import ModelConfig
from refimpl.costmodel.step import RooflineStepModel
from refimpl.engine.engine import Engine
from refimpl.engine.executor import SimulatedExecutor
from refimpl.engine.loop import ahead_calls, serve
from refimpl.kv.pool import PagePool
from refimpl.sched.policies.vllm import VLLMPolicy
from refimpl.sched.request import Request

__all__ = ["HELPER_CALLS", "OWN_CALLS", "compile_calls", "loop_ready", "prepare_loop",
           "warm_up"]

# The split of `ahead_calls`, by the inclusive compile times of a cold serial loop of 117 s
# (a 2-core AMD EPYC, docs/performance.md): the planners 41 + 17 s; here the gate's arrival and
# poll 24 + 8 s, the commit's prepare 9 s and the small calls 7 s, then the loop's own 10 s
HELPER_CALLS = ("plan_slo", "plan_step")
OWN_CALLS = ("arrive", "poll_gate", "prepare", "commit_tokens", "update", "policy_update",
             "observe_gate")
HELPER_TIMEOUT_S = 900.0  # past this the helper is stopped and its calls compiled here


def loop_ready() -> bool:
    """Whether this process has the serving loop compiled (or loaded) already."""
    return bool(serve.signatures)


def warm_up() -> float:
    """Compile the serving loop in this process (or load it from Numba's cache); returns the
    seconds that took, 0 if it was ready. Every run uses the same compiled loop, so one tiny
    run prepares it for all policies."""
    if loop_ready():
        return 0.0
    started = time.perf_counter()
    helper = None
    if _worth_a_helper():
        with contextlib.suppress(OSError):  # no helper (none can start here): all done here
            helper = _start_helper()
    try:
        if helper is not None:
            compile_calls(OWN_CALLS)
            with contextlib.suppress(subprocess.TimeoutExpired):  # the loop compiles the rest
                helper.wait(timeout=HELPER_TIMEOUT_S)
        engine, requests = _warm_up_run()
        engine.run(requests)
    finally:
        if helper is not None and helper.poll() is None:
            helper.kill()
            helper.wait()
    return time.perf_counter() - started


def prepare_loop() -> float:
    """Compile (or load) the serving loop in this process, saying so on the terminal; returns
    the seconds it took. A sweep does it first: the Numba cache it fills is what workers load
    from, so no two processes compile it at once."""
    if loop_ready():
        return 0.0
    print("preparing the serving loop (compiled once per machine: about a minute with two "
          "cores, a minute and a half with one; then loaded from Numba's cache) ...", end=" ",
          file=sys.stderr, flush=True)
    seconds = warm_up()
    print(f"{seconds:.1f} s", file=sys.stderr)
    return seconds


def compile_calls(names: Sequence[str]) -> None:
    """Compile (or load) the loop's calls `names` (keys of `loop.ahead_calls`) for the
    argument types the loop passes them; the cache keeps them for the loop."""
    engine, requests = _warm_up_run()
    calls = ahead_calls(*engine.loop_arguments(requests))
    for name in names:
        function, arguments = calls[name]
        function.compile(tuple(numba.typeof(a) for a in arguments))


def _warm_up_run() -> tuple[Engine, list[Request]]:
    """The tiny run that compiles the loop: one request, `vllm`, a simulated clock."""
    model = ModelConfig.preset("llama-3-8b")
    step_model = RooflineStepModel(model, HardwareSpec.preset("h100-sxm"))
    engine = Engine(VLLMPolicy(), SimulatedExecutor(step_model), PagePool(8, 16), model)
    return engine, [Request(0, 0.0, 4, 2)]


def _worth_a_helper() -> bool:
    """A second process pays only with a second core and a cache to hand its builds over
    through, and only while that cache does not hold the loop already."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (bool(sys.executable) and (cores or 1) > 1 and serve.caches_on_disk()
            and not serve.has_cached_build())


def _start_helper(names: Sequence[str] = HELPER_CALLS) -> subprocess.Popen:
    """A process compiling the loop's calls `names` into the cache (this interpreter, this
    environment)."""
    code = f"from refimpl.engine.compile_loop import compile_calls; compile_calls({tuple(names)!r})"
    # this process's import path, so it finds the refimpl this process runs, however found
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
