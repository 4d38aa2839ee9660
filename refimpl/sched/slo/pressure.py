"""The `slo` policy's answer to KV pressure: the seed's ladder, applied to its requests.

Each tick, above the ladder's first watermark, `PressureResponse.relieve` hands the decoding
requests to `refimpl.kv.PressureLadder` as victims-to-be and carries out for each request what
the ladder did to its pages: a length-capped request finishes now (its output so far kept), a
quantized one decodes on from denser pages, a spilled one leaves the decode set until it is
restored (both transfers charged to the step), a preempted one recomputes later. Below the
first watermark, spilled requests come back, oldest first, while they keep the pool under it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from refimpl.kv.ladder import KVCandidate, LadderConfig, LadderStep, PressureLadder
from refimpl.sched.request import Request

__all__ = ["PressureResponse", "Relief"]


@dataclass
class Relief:
    """What the scheduler must do this tick because of the ladder."""

    finish: list[tuple[Request, str]] = field(default_factory=list)  # (request, reason)
    preempted: list[Request] = field(default_factory=list)  # to recompute
    restored: list[Request] = field(default_factory=list)  # back from the CPU tier
    transfer_s: float = 0.0  # spill and restore copies, charged to the step


class PressureResponse:
    """Runs the ladder over the decode set and tracks the requests it spilled."""

    def __init__(self, config: LadderConfig, page_bytes: int,
                 host_bandwidth_bytes_s: float) -> None:
        self.ladder = PressureLadder(config, page_bytes, host_bandwidth_bytes_s)
        self.spilled: list[Request] = []  # in spill order

    def relieve(self, kv, decode_set, now_s: float) -> Relief:
        """Climb the ladder if the pool is over its first watermark; else bring spills back."""
        relief = Relief()
        pool = kv.pool
        if kv.utilization() <= self.ladder.config.queue_new_above:
            if self.spilled:
                self._restore(kv, relief)
            return relief
        decoding = [r for r in decode_set.requests if r is not None]  # only under pressure
        by_id = {r.request_id: r for r in decoding}
        candidates = [KVCandidate(r.request_id, r.priority, r.num_computed,
                                  r.next_token_deadline_s() - now_s, r.arrival_s)
                      for r in decoding]
        for action in self.ladder.relieve(pool, candidates, now_s):
            request = by_id.get(action.request_id)
            if request is None:  # QUEUE_NEW: the policy already holds new prompts back
                continue
            if action.step in (LadderStep.CAP_LENGTH, LadderStep.PREEMPT):
                request.kv_slot = -1  # the ladder freed its pages
                if action.step is LadderStep.CAP_LENGTH:
                    relief.finish.append((request, "length_capped"))
                else:
                    relief.preempted.append(request)
            elif action.step is LadderStep.SPILL:
                self.spilled.append(request)
                relief.transfer_s += action.transfer_s
        return relief

    def _restore(self, kv, relief: Relief) -> None:
        """Bring spilled requests back while the pool stays under the first watermark."""
        pool, limit = kv.pool, self.ladder.config.queue_new_above
        while self.spilled:
            request = self.spilled[0]
            pages = int(pool.num_pages_of[pool.slot(request.request_id)])  # in the CPU tier
            if (pool.num_used_pages + pages) / pool.num_pages > limit:
                return
            pool.restore(request.request_id)
            self.spilled.pop(0)
            relief.restored.append(request)
            relief.transfer_s += pages * self.ladder.page_bytes / (
                self.ladder.host_bandwidth_bytes_s)
