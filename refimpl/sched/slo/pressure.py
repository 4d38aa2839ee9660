"""The `slo` policy's answer to KV pressure: the seed's ladder, decided as part of the plan.

Each tick, above the ladder's first watermark, the decoding requests are the ladder's
victims-to-be. `climb` asks the compiled ladder decision (`refimpl.kv.ladder.plan_relief`,
the one definition of `PressureLadder`'s rules: thresholds, victim order, what each step
frees) what each step does to which request, on the tick's `Projection` of the pool, and
applies the answer to the projection, never to the pool; the plan carries it out:
a length-capped request finishes (its output so far kept), a quantized one decodes on from
denser pages, a spilled one leaves the decode set until it is restored, a preempted one
recomputes later. Below the first watermark, `restores` brings spilled requests back, oldest
first, while they keep the pool under it. The copies to and from the CPU tier are the
executor's to charge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from refimpl.kv.ladder import LadderConfig, LadderStep, plan_relief
from refimpl.sched.slo.queues import next_token_deadlines_s

if TYPE_CHECKING:
    from refimpl.kv.projection import Projection
    from refimpl.sched.slo.draft import TickDraft
    from refimpl.sched.table import RequestTable

__all__ = ["LadderMove", "climb", "draft_relief", "restores"]

class LadderMove(NamedTuple):
    """One ladder action: its step, the request, the pages it frees."""

    step: LadderStep
    row: int
    pages_freed: int


def climb(config: LadderConfig, kv: Projection, requests: RequestTable, rows: np.ndarray,
          now_s: float) -> list[LadderMove]:
    """The ladder's actions over the decoding `rows`, each applied to `kv` in turn.

    Each step acts, victim after victim, while utilization is above its threshold; a request
    leaves the pool (capped, spilled or preempted) at most once.
    """
    decided = plan_relief(config, kv.arrays(), kv.page_size, kv.cpu_capacity(), kv.slots(rows),
                          requests.priority[rows], requests.num_computed[rows],
                          next_token_deadlines_s(requests, rows) - now_s,
                          requests.arrival_s[rows], requests.request_id[rows])
    moves = []
    for step, c, freed, _ in decided:
        i = int(rows[c])
        if step is LadderStep.QUANTIZE:
            done = kv.quantize(i, config.quantize_factor)
        elif step is LadderStep.SPILL:
            done = kv.spill(i)[0]
        elif step is LadderStep.PREEMPT:
            done = kv.preempt(i)
        else:
            done = kv.release(i)
        assert done == freed, (step, i, done, freed)  # the projection follows the decision
        moves.append(LadderMove(step, i, freed))
    return moves


def restores(limit: float, kv: Projection, spilled: list[int]) -> list[int]:
    """Spilled requests to bring back, oldest first, while the pool stays at most `limit`
    full; each is applied to `kv`."""
    back = []
    for i in spilled:
        if (kv.used + kv.pages_held(i)) / kv.num_pages > limit:
            break
        kv.restore(i)
        back.append(i)
    return back


def draft_relief(ladder: LadderConfig, draft: TickDraft, now_s: float) -> None:
    """Draft the ladder's actions of this tick into `draft`: restores below the first
    watermark, else holding new prompts and the rungs `climb` decides (capped, preempted,
    spilled requests leave the decode set in that order, as the old scheduler did)."""
    kv, requests = draft.kv, draft.requests
    if kv.utilization() <= ladder.queue_new_above:
        for i in restores(ladder.queue_new_above, kv, draft.spilled):
            draft.restore_in(i)
        return
    if not draft.holding:  # holding new prompts is a state, counted when it starts
        draft.holding = True
        draft.counts[str(LadderStep.QUEUE_NEW)] += 1
    moves = climb(ladder, kv, requests, draft.decode.decoding(), now_s)
    for move in moves:
        draft.counts[str(move.step)] += 1
        if move.step is LadderStep.QUANTIZE:
            draft.quantize.append((move.row, ladder.quantize_factor))
    # The decode set gives up its rows as the old scheduler did: capped, preempted, spilled.
    for move in moves:
        if move.step is LadderStep.CAP_LENGTH:
            draft.finish_early(move.row, "length_capped")
    for move in moves:
        if move.step is LadderStep.PREEMPT:
            draft.preempt_decoding(move.row, freed=True)
    for move in moves:
        if move.step is LadderStep.SPILL:
            draft.spill_out(move.row)
