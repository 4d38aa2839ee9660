"""The `slo` policy's decode batch: the deadline knapsack under the tick, pages and batch size.

The greedy deadline knapsack (`refimpl.sched.slo.knapsack`) picks the decode batch by length
bucket under the tick's decode window, the free KV pages and `max_batch`; requests due within
`horizon_ticks` ticks are urgent. While urgent decodes the batch left out need more pages than
are free, the least important decoding request not in the batch (largest priority number,
then latest arrival, then highest slot) is preempted and the knapsack runs again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from refimpl.sched.slo.budget import Tick
    from refimpl.sched.slo.draft import TickDraft

__all__ = ["choose_decodes", "preemption_victim"]


def choose_decodes(policy, draft: TickDraft, tick: Tick, now_s: float
                   ) -> tuple[np.ndarray, int]:
    """The decode batch's slots in `draft.decode` and the pages it takes; preempts (in the
    draft) while urgent ones lack pages."""
    decode, kv = draft.decode, draft.kv
    if not len(decode):
        return np.empty(0, np.int64), 0
    out = np.empty(len(decode.active), np.int64)
    stats = np.zeros(2, np.int64)  # pages taken, pages of urgent requests left out
    horizon_s = policy.horizon_ticks * tick.tick_s
    window_s = max(tick.window_s, 0.0)
    while True:
        count = policy._select(
            decode.deadline_s, tick.est_s, decode.weight, tick.buckets, tick.kv_need,
            decode.active, now_s, horizon_s, window_s, kv.free, policy.max_batch,
            policy.value_mode, policy.lateness_scale_s, out, stats)
        slots = out[:count]
        if stats[1] <= kv.free - stats[0]:  # urgent ones have their pages
            return slots, int(stats[0])
        victim = preemption_victim(draft, slots)
        if victim < 0:
            return slots, int(stats[0])
        draft.preempt_decoding(victim)


def preemption_victim(draft: TickDraft, batch: np.ndarray) -> int:
    """The least important decoding row outside `batch`, -1 when there is none."""
    decode, requests = draft.decode, draft.requests
    exclude = set(batch.tolist())
    best, best_key = -1, None
    for slot in np.flatnonzero(decode.active).tolist():
        if slot in exclude:
            continue
        i = int(decode.rows[slot])
        key = (int(requests.priority[i]), float(requests.arrival_s[i]), slot)
        if best_key is None or key > best_key:
            best, best_key = i, key
    return best
