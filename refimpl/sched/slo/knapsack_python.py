"""The seed's greedy deadline knapsack written plainly in Python over lists.

The same algorithm as refimpl.sched.slo.knapsack (its module doc), kept as the tests' oracle
and the baseline `refimpl bench sched` times the compiled version against; nothing serves
with it.
"""

from __future__ import annotations

from refimpl.sched.slo.knapsack import VALUE_PER_TIME

__all__ = ["select_decode_batch_python"]


def select_decode_batch_python(deadline_s, est_time_s, weight, bucket, kv_need, active, now_s,
                               horizon_s, time_budget_s, kv_budget_pages, max_batch,
                               value_mode, lateness_scale_s) -> list[int]:
    """`select_decode_batch` written plainly in Python over lists: the benchmark's baseline."""
    slots = [s for s in range(len(active)) if active[s]]
    if not slots:
        return []
    chosen: list[int] = []
    left = [time_budget_s, kv_budget_pages]

    def take_in_order(candidates: list[int]) -> None:
        for s in candidates:
            if len(chosen) == max_batch:
                return
            if est_time_s[s] <= left[0] and kv_need[s] <= left[1]:
                left[0] -= est_time_s[s]
                left[1] -= kv_need[s]
                chosen.append(s)

    take_in_order(sorted((s for s in slots if deadline_s[s] < now_s + horizon_s),
                         key=lambda s: (deadline_s[s], s)))
    opened = {bucket[s] for s in chosen}
    if not chosen:
        opened.add(bucket[min(slots, key=lambda s: (deadline_s[s], s))])

    def value(s: int) -> float:
        if value_mode == VALUE_PER_TIME:
            return weight[s] / max(est_time_s[s], 1e-12)
        return weight[s] / (1.0 + max(deadline_s[s] - now_s, 0.0) / lateness_scale_s)

    taken = set(chosen)
    take_in_order(sorted((s for s in slots if s not in taken and bucket[s] in opened),
                         key=lambda s: (-value(s), s)))
    return chosen
