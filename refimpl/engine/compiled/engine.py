"""`CompiledEngine`: `Engine`'s interface, with the whole loop run by one compiled call.

For the built-in baselines (vllm, sarathi, prefill-first, with their `max_num_seqs` and
`token_budget`) on `RooflineStepModel`: the wrapper validates, turns the requests into arrays,
runs `serve`, writes the results back into the `Request` objects and returns the same
`EngineRun` as `Engine.run`, equal to it record for record (decision times aside: wall time).

Decision time: `decision_s` of each step is the policy's own decision, timed around the
compiled `decide` call with `clock_gettime` (see `clock.py`), as `Engine` times `schedule`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from refimpl.config.model import ModelConfig
from refimpl.costmodel.step import RooflineStepModel
from refimpl.engine.compiled import state
from refimpl.engine.compiled.loop import STEP_FLOAT_FIELDS, STEP_INT_FIELDS, serve
from refimpl.engine.compiled.policies import PREFILL_FIRST, SARATHI, VLLM
from refimpl.engine.engine import EngineRun, Progress
from refimpl.engine.executor import SimulatedExecutor
from refimpl.errors import ConfigError
from refimpl.kv.manager import KVManager
from refimpl.metrics.records import StepRecords
from refimpl.sched.policies.prefill_first import PrefillFirstPolicy
from refimpl.sched.policies.sarathi import SarathiPolicy
from refimpl.sched.policies.vllm import VLLMPolicy
from refimpl.sched.policy import Policy, QueuePolicy
from refimpl.sched.request import Request, RequestStatus

__all__ = ["CompiledEngine", "supports"]

INITIAL_STEPS = 4096  # rows of the step records before the first doubling
# Exact classes only: a subclass may override `schedule`, which the compiled twin would ignore.
_POLICY_CODES = {VLLMPolicy: VLLM, SarathiPolicy: SARATHI, PrefillFirstPolicy: PREFILL_FIRST}


def supports(policy: Policy, executor: SimulatedExecutor) -> bool:
    """Whether the compiled loop can run `policy` (a built-in baseline) on `executor`."""
    return (type(policy) in _POLICY_CODES
            and type(getattr(executor, "step_model", None)) is RooflineStepModel)


class CompiledEngine:
    """Serves requests like `Engine`, the loop compiled with Numba (built-in baselines only)."""

    def __init__(self, policy: QueuePolicy, executor: SimulatedExecutor, kv: KVManager,
                 model: ModelConfig, cost_table: object = None) -> None:
        if not supports(policy, executor):
            raise ConfigError("policy", getattr(policy, "name", policy), "the compiled engine "
                              "runs the built-in vllm, sarathi and prefill-first on "
                              "RooflineStepModel; use the Python engine for others")
        self.policy = policy
        self.executor = executor
        self.kv = kv
        self.model = model
        del cost_table  # `Engine`'s signature; the baselines pick no kernels
        policy.bind(kv)

    def run(self, requests: Sequence[Request], progress: Progress | None = None) -> EngineRun:
        """Serve `requests` to the end in one compiled call; returns the records."""
        pool, policy = self.kv.pool, self.policy
        if pool.request_ids() or policy.waiting or policy.running:
            raise ConfigError("engine", "compiled", "needs an empty KV pool and policy")
        pending = sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
        max_running = max(1, min(policy.max_num_seqs, len(pending)))
        ints, floats = state.new_requests(pending)
        num_steps, step_f, step_i = serve(
            _POLICY_CODES[type(policy)], policy.token_budget, policy.max_num_seqs,
            self.executor.step_model.coefficients, self.model.max_context,
            time.CLOCK_MONOTONIC, ints, floats, state.new_pool(pool, max_running),
            state.new_queues(len(pending), max_running),
            np.zeros((INITIAL_STEPS, len(STEP_FLOAT_FIELDS))),
            np.zeros((INITIAL_STEPS, len(STEP_INT_FIELDS)), dtype=np.int64))
        _write_back(ints, floats, pending)
        unfinished = [r.request_id for r in pending if not r.is_finished]
        if unfinished or pool.num_free_pages != pool.num_pages:
            raise AssertionError(  # an engine or policy bug, never the user's input
                f"run ended with requests {unfinished[:5]} unfinished and "
                f"{pool.num_used_pages} KV pages still held")
        if progress is not None:
            progress(len(pending), len(pending))
        columns = {name: np.ascontiguousarray(step_f[:num_steps, k])
                   for k, name in enumerate(STEP_FLOAT_FIELDS)}
        columns.update({name: np.ascontiguousarray(step_i[:num_steps, k])
                        for k, name in enumerate(STEP_INT_FIELDS)})
        return EngineRun(pending, StepRecords(**columns, kv_total_pages=pool.num_pages))


def _write_back(ints: np.ndarray, floats: np.ndarray, requests: Sequence[Request]) -> None:
    """Copy the compiled run's results into the `Request` objects, as `Engine` leaves them."""
    columns = {name: ints[state.INT_FIELDS.index(name)].tolist() for name in (
        "num_computed", "num_generated", "num_preemptions")}
    columns.update({name: floats[state.FLOAT_FIELDS.index(name)].tolist() for name in (
        "first_scheduled_s", "first_token_s", "last_token_s", "finish_s")})
    status, reason = ints[state.STATUS].tolist(), ints[state.REASON].tolist()
    for k, request in enumerate(requests):
        request.status = RequestStatus(status[k])
        request.finish_reason = state.REASONS[reason[k]]
        for name, values in columns.items():
            setattr(request, name, values[k])
        request.kv_slot = -1
