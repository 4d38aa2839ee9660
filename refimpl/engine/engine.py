"""`Engine`: one serving run, from `Request` objects to records, through the one compiled loop.

The wrapper around `refimpl.engine.loop.serve`: it lays the run out as arrays (the request
table, the KV facade over the page pool, the queues, the plan), binds the policy and the gate
to a context over them, registers the Python side with the bridge, runs the loop in one call,
writes the results back into the `Request` objects and returns the records. Every request
ends finished or rejected with a reason, and every KV page is back in the pool when `run`
returns; `run` checks both. With `prefix_cache`, requests that carry block hashes share the
KV pages of cached prompt prefixes (refimpl.kv.prefix); the cache is emptied at the end.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from refimpl.admission.gate import Gate
from refimpl.admission.state import GateState, no_gate_state
from refimpl.config.model import ModelConfig
from refimpl.engine import bridge
from refimpl.engine.contract import PLAN_ERRORS
from refimpl.engine.dispatch import RunArrays, budget_slot, policy_params, slo_state
from refimpl.engine.executor import MEASURED, SimulatedExecutor
from refimpl.engine.loop import (
    COMPILED_GATE,
    MAX_IDLE_STEPS,
    NO_GATE,
    NO_PROGRESS,
    PYTHON_GATE,
    STEP_FLOAT_FIELDS,
    STEP_INT_FIELDS,
    serve,
)
from refimpl.errors import ConfigError, SchedulingError
from refimpl.kv.manager import new_kv_state
from refimpl.kv.pool import PagePool
from refimpl.kv.prefix import BLOCK_TOKENS, STAT_FIELDS, new_prefix_state
from refimpl.kv.prefix_facade import flush_prefix
from refimpl.kv.view import KVView
from refimpl.metrics.records import FINISHED, REJECTED, RequestRecords, StepRecords
from refimpl.sched.plan import new_plan_arrays
from refimpl.sched.policy import BuiltinPolicy, Policy, PolicyContext
from refimpl.sched.queues import NUM_RUNNING, WAIT_HEAD, WAIT_LEN, new_queues
from refimpl.sched.request import Request, RequestStatus, block_hashes_of
from refimpl.sched.table import (
    COMPUTED,
    NameCodes,
    RequestTable,
    arrival_order,
    new_requests,
    write_back,
)

__all__ = ["Engine", "EngineRun"]

Progress = Callable[[int, int], None]  # (requests ended, requests in all)
INITIAL_STEPS = 4096  # rows of the step records before the first doubling
PROGRESS_EVERY, PROGRESS_EVERY_EXECUTED = 8192, 8  # steps between progress reports


class EngineRun:
    """The records of one run, and the requests themselves for inspection."""

    def __init__(self, requests: list[Request], steps: StepRecords) -> None:
        self.request_list = requests
        self.requests = _request_records(requests)
        self.steps = steps


class Engine:
    """Serves requests with a policy, an optional gate and an executor over a page pool."""

    def __init__(self, policy: Policy, executor: SimulatedExecutor, pool: PagePool,
                 model: ModelConfig, *, hardware: Any = None, cost_table: Any = None,
                 gate: Gate | None = None, prefix_cache: bool = False,
                 prefix_block_tokens: int = BLOCK_TOKENS) -> None:
        if not isinstance(policy, Policy):
            raise ConfigError("policy", policy, "must be a refimpl.Policy")
        if not isinstance(prefix_cache, bool):
            raise ConfigError("prefix_cache", prefix_cache, "must be True or False")
        self.policy, self.executor, self.pool, self.model = policy, executor, pool, model
        self.hardware, self.cost_table = hardware, cost_table
        self.gate = gate
        self.prefix_cache, self.prefix_block_tokens = prefix_cache, prefix_block_tokens

    def run(self, requests: Sequence[Request], progress: Progress | None = None, *,
            block_hashes: Mapping[int, tuple[int, ...]] | None = None) -> EngineRun:
        """Serve `requests` (in arrival order) to the end; returns the records. The prefix
        cache keys a request's blocks on `block_hashes[request_id]` where given (the real
        engine's token hashes), else on its own `block_hashes`."""
        serving = self._start(requests, progress, block_hashes)
        with bridge.registered(serving.bridge) as handle:
            outcome = serve(*serving.arguments(handle))
        return self._finish(serving, outcome, progress)

    def loop_arguments(self, requests: Sequence[Request]) -> tuple:
        """The serving loop's arguments for `requests` (no bridge handle), without serving:
        what compiling the loop's calls ahead of it needs (refimpl.engine.compile_loop). The
        policy and the gate are bound to them, as a run binds them."""
        return self._start(requests, None, None).arguments(0)

    def _start(self, requests: Sequence[Request], progress: Progress | None,
               block_hashes: Mapping[int, tuple[int, ...]] | None) -> _Serving:
        """The run laid out and the policy and the gate bound, ready to serve."""
        if self.pool.request_ids():
            raise ConfigError("pool", self.pool.request_ids()[:5], "must be empty before a run")
        pending = arrival_order(requests)
        arrays, context = self._lay_out(pending, block_hashes)
        gate = None if self.gate is None or self.gate.passes_everything else self.gate
        self.policy.bind(context)
        if gate is not None:
            gate.bind(context)
        n, plan = len(pending), new_plan_arrays(len(pending))
        finished, started = np.zeros(max(n, 1), np.int64), np.zeros(max(n, 1), np.int64)
        gate_out = np.zeros((4, max(n, 1)), np.int64)
        compiled = getattr(self.policy, "compiled", None)  # the compiled slo's kernel names
        kernels = NameCodes(compiled.kernel_names if compiled is not None else ())
        reasons, kernel_counts = NameCodes(), np.zeros(bridge.MAX_KERNELS, np.int64)
        slo = slo_state(self.policy)
        run = bridge.RunBridge(self.policy, gate, self.executor, plan, finished, gate_out,
                               reasons, kernels, arrays, budget_slot(slo), progress)
        return _Serving(self, pending, arrays, gate, plan, finished, started, gate_out, slo,
                        kernels, kernel_counts, run)

    def _finish(self, serving: _Serving, outcome: tuple, progress: Progress | None
                ) -> EngineRun:
        """The records of a served run, the results written back and checked."""
        num_steps, step_f, step_i, error, row = outcome
        pending, arrays, gate = serving.pending, serving.arrays, serving.gate
        if error:
            value = f"request {row}" if row >= 0 else "steps" if error == NO_PROGRESS else "pages"
            raise SchedulingError("plan", value, f"policy {self.policy.name!r}'s plan "
                                  + PLAN_ERRORS[error].replace("MAX_IDLE_STEPS",
                                                               str(MAX_IDLE_STEPS)))
        prefix = arrays.kv.prefix
        stats = prefix.view("stats").tolist()
        prefix_counts = ({name: int(v) for name, v in zip(STAT_FIELDS, stats, strict=True)}
                         if prefix.enabled else {})
        flush_prefix(arrays.kv)  # every request ended: the cached pages go back to the pool
        write_back(arrays.ints, arrays.floats, serving.bridge.reasons, pending)
        self._check_nothing_lost(pending)
        if progress is not None:
            progress(len(pending), len(pending))
        columns = {name: np.ascontiguousarray(step_f[:num_steps, k])
                   for k, name in enumerate(STEP_FLOAT_FIELDS)}
        columns.update({name: np.ascontiguousarray(step_i[:num_steps, k])
                        for k, name in enumerate(STEP_INT_FIELDS)})
        usage = {serving.kernels.names[c]: int(serving.kernel_counts[c])
                 for c in np.flatnonzero(serving.kernel_counts)}
        return EngineRun(pending, StepRecords(
            **columns, kv_total_pages=self.pool.num_pages, kernel_usage=usage,
            admission_counts=dict(Counter(gate.counts)) if gate is not None else {},
            kv_actions=self.policy.kv_actions(), prefix_cache=prefix_counts))

    def _lay_out(self, pending: Sequence[Request],
                 block_hashes: Mapping[int, tuple[int, ...]] | None = None
                 ) -> tuple[RunArrays, PolicyContext]:
        """The run's arrays for `pending` (the request table, the KV facade, the queues), and
        the context policies and gates read them through."""
        n = len(pending)
        ints, floats = new_requests(pending)
        prefix = None
        if self.prefix_cache:
            hashes = [block_hashes_of(r) if block_hashes is None
                      else tuple(block_hashes.get(r.request_id, ())) for r in pending]
            if any(hashes):
                prefix = new_prefix_state(hashes, self.pool.num_pages, self.pool.page_size,
                                          self.prefix_block_tokens)
        kv = new_kv_state(self.pool, n, self._max_holders(n), prefix)
        q = new_queues(n, n)
        arrays = RunArrays(ints, floats, kv, q)
        context = PolicyContext(
            RequestTable(ints, floats, [r.slo for r in pending]), KVView(kv, ints[COMPUTED]),
            lambda: _ring(q.waiting, q.sizes[WAIT_HEAD], q.sizes[WAIT_LEN]),
            lambda: q.running[:q.sizes[NUM_RUNNING]].copy(),
            self.executor.step_model, self.model, self.hardware, self.cost_table, arrays,
            self.policy.prefill_order, self.policy.max_running)
        return arrays, context

    def _progress_every(self, progress: Progress | None) -> int:
        """Steps between progress reports: each is a crossing to Python, nothing beside a
        simulated step, little beside an executed one."""
        if progress is None:
            return 0
        return PROGRESS_EVERY_EXECUTED if self.executor.code == MEASURED else PROGRESS_EVERY

    def _rates(self) -> np.ndarray:
        """[bytes of a KV page, bytes/s between the device and the CPU tier, the clock's
        scale] (no cost to move pages without hardware; a measured clock is never scaled)."""
        if self.executor.code == MEASURED:  # (a real copy is timed)
            return np.array([0.0, 1.0, 1.0])
        scale = self.executor.clock_scale
        if self.hardware is None:
            return np.array([0.0, 1.0, scale])
        page_bytes = self.model.kv_bytes_per_token() * self.pool.page_size
        return np.array([float(page_bytes), self.hardware.host_bandwidth_bytes_s, scale])

    def _max_holders(self, num_requests: int) -> int:
        """Most requests that can hold KV at once: the batch limit, else every page's worth."""
        if isinstance(self.policy, BuiltinPolicy):
            return min(self.policy.max_num_seqs, num_requests)
        return min(num_requests, self.pool.num_pages + self.pool.cpu_tier_pages)

    def _check_nothing_lost(self, requests: Sequence[Request]) -> None:
        unfinished = [r.request_id for r in requests if not r.is_finished]
        if unfinished or self.pool.num_free_pages != self.pool.num_pages:
            raise AssertionError(  # a loop or policy bug, never the user's input
                f"run ended with requests {unfinished[:5]} unfinished and "
                f"{self.pool.num_used_pages} KV pages still held")


@dataclass
class _Serving:
    """A run laid out for the loop: what `serve` is handed and what the records read after."""

    engine: Engine
    pending: list[Request]
    arrays: RunArrays
    gate: Gate | None
    plan: Any
    finished: np.ndarray
    started: np.ndarray
    gate_out: np.ndarray
    slo: Any
    kernels: NameCodes
    kernel_counts: np.ndarray
    bridge: bridge.RunBridge

    def arguments(self, handle: int) -> tuple:
        """`serve`'s arguments, the run's Python side registered as `handle`."""
        engine, progress = self.engine, self.bridge.progress
        config = np.array([engine.policy.code, _gate_kind(self.gate), engine.executor.code,
                           handle, engine.model.max_context, time.CLOCK_MONOTONIC,
                           _observes(engine.policy), engine._progress_every(progress)],
                          np.int64)
        return (config, policy_params(engine.policy), engine._rates(),
                engine.executor.coefficients, self.arrays.ints, self.arrays.floats,
                self.arrays.kv, self.arrays.queues, self.slo, _gate_state(self.gate), self.plan,
                self.finished, self.started, self.gate_out, self.kernel_counts,
                np.zeros((INITIAL_STEPS, len(STEP_FLOAT_FIELDS))),
                np.zeros((INITIAL_STEPS, len(STEP_INT_FIELDS)), np.int64))


def _gate_kind(gate: Gate | None) -> int:
    """The loop's code for `gate`: none, a Python one (bridged) or a compiled one."""
    if gate is None:
        return NO_GATE
    return COMPILED_GATE if gate.compiled else PYTHON_GATE


def _gate_state(gate: Gate | None) -> GateState:
    """The compiled gate's state, a tiny dummy for others (the loop takes one either way)."""
    return gate.state if _gate_kind(gate) == COMPILED_GATE else no_gate_state()


def _observes(policy: Policy) -> bool:
    """Whether the loop must tell `policy` of every committed step (it overrides a hook)."""
    kind = type(policy)
    return (kind.update_from_output is not Policy.update_from_output
            or kind.num_waiting is not Policy.num_waiting)


def _ring(ring: np.ndarray, head: int, length: int) -> np.ndarray:
    """The `length` entries of a ring buffer from `head`, in order (a copy)."""
    end = head + length
    if end <= len(ring):
        return ring[head:end].copy()
    return np.concatenate((ring[head:], ring[:end - len(ring)]))


def _request_records(requests: Sequence[Request]) -> RequestRecords:
    def column(getter, dtype):
        return np.fromiter((getter(r) for r in requests), dtype=dtype, count=len(requests))

    def text(getter):
        values = np.empty(len(requests), dtype=object)
        values[:] = [getter(r) for r in requests]
        return values

    return RequestRecords(
        request_id=column(lambda r: r.request_id, np.int64),
        arrival_s=column(lambda r: r.arrival_s, np.float64),
        prompt_tokens=column(lambda r: r.prompt_tokens, np.int64),
        max_new_tokens=column(lambda r: r.max_new_tokens, np.int64),
        priority=column(lambda r: r.priority, np.int64),
        slo_class=text(lambda r: r.slo_class),
        ttft_slo_s=column(lambda r: r.slo.ttft_s, np.float64),
        tpot_slo_s=column(lambda r: r.slo.tpot_s, np.float64),
        status=text(lambda r: FINISHED if r.status is RequestStatus.FINISHED else REJECTED),
        reason=text(lambda r: r.finish_reason),
        first_scheduled_s=column(lambda r: r.first_scheduled_s, np.float64),
        first_token_s=column(lambda r: r.first_token_s, np.float64),
        finish_s=column(lambda r: r.finish_s, np.float64),
        num_generated=column(lambda r: r.num_generated, np.int64),
        num_preemptions=column(lambda r: r.num_preemptions, np.int64),
    )
