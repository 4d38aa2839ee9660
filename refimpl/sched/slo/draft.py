"""One tick's plan while the `slo` policy drafts it: its actions, and the state they leave.

The old scheduler carried out each decision at once (a ladder action, a preemption, a
restore) and planned the rest of the tick on the changed state. A draft records each decision
instead and applies it to views that change nothing underneath: the KV `Projection`, the
`DecodeDraft` of the decode set, and the prefill queue as seen through the rows the draft
(re)queued and the entries it replaced. `plan` turns the draft into the `StepPlan`; once the
loop has committed it, the policy takes the draft's moves on (`SLOPolicy.update_from_output`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from refimpl.kv.ladder import LadderStep
from refimpl.kv.projection import Projection
from refimpl.sched.plan import StepPlan
from refimpl.sched.slo.queues import PrefillKey, next_token_deadline_s, prefill_key

if TYPE_CHECKING:
    from refimpl.sched.policy import PolicyContext
    from refimpl.sched.slo.queues import DecodeSet, PrefillQueue

__all__ = ["TickDraft"]


class TickDraft:
    """The plan of one tick so far, and the KV cache and queues as it leaves them."""

    def __init__(self, ctx: PolicyContext, decode: DecodeSet, prefill: PrefillQueue,
                 spilled: list[int], holding: bool) -> None:
        self.requests = ctx.requests
        self.kv = Projection(ctx.kv, ctx.requests.num_computed)
        self.decode = decode.draft()
        self.queue = prefill  # read only: the draft's changes are the two fields below
        self.requeued: dict[int, PrefillKey] = {}  # rows the plan (re)queues, with their key
        self.unqueued: set[int] = set()  # queued rows whose entry the plan replaces
        self.spilled = list(spilled)  # rows in the CPU tier, in spill order
        self.holding = holding  # above the ladder's first watermark (queue_new recorded)
        self.counts: Counter[str] = Counter()  # ladder step -> actions in this plan
        self.finish: list[tuple[int, str]] = []
        self.preempt: list[int] = []
        self.spill: list[int] = []
        self.restore: list[int] = []
        self.quantize: list[tuple[int, int]] = []  # (row, factor)

    # ---- the prefill queue as the plan leaves it -------------------------------------------
    def num_waiting(self) -> int:
        """Rows with prompt tokens left."""
        return len(self.queue) - len(self.unqueued) + len(self.requeued)

    def waiting(self) -> Iterator[tuple[PrefillKey, int]]:
        """`(key, row)` of the waiting rows in queue order."""
        return self.queue.ordered(((key, i) for i, key in self.requeued.items()),
                                  self.unqueued)

    def head(self) -> tuple[float, int, int]:
        """The most urgent waiting row's (deadline, computed tokens, tokens left)."""
        key, i = next(iter(self.waiting()))
        computed = self.kv.num_computed(i)
        left = int(self.requests.prompt_tokens[i] + self.requests.num_generated[i]) - computed
        return key[0], computed, left

    def queued_entries(self) -> Iterator[tuple[PrefillKey, int]]:
        """`(key, row)` of the waiting rows, in no order."""
        for key, i in self.queue.entries():
            if i not in self.unqueued:
                yield key, i
        for i, key in self.requeued.items():
            yield key, i

    # ---- decisions -------------------------------------------------------------------------
    def _requeue(self, i: int) -> None:
        """Row `i` is preempted: it recomputes from scratch, queued under its new key. Its
        quantization or restore earlier in this plan is taken back (a preemption supersedes
        them: refimpl.engine.commit.drop_superseded), and not counted."""
        self.preempt.append(i)
        self.requeued[i] = prefill_key(self.requests, i, 0)
        kept = [(row, factor) for row, factor in self.quantize if row != i]
        if len(kept) < len(self.quantize):
            self.quantize = kept
            self.counts[str(LadderStep.QUANTIZE)] -= 1
        if i in self.restore:
            self.restore.remove(i)

    def preempt_decoding(self, i: int, freed: bool = False) -> None:
        """Decoding row `i` loses its KV (already `freed` in the projection by the ladder)."""
        self.decode.remove(i)
        if not freed:
            self.kv.preempt(i)
        self._requeue(i)

    def preempt_queued(self, i: int) -> None:
        """Queued row `i` (a prompt part-way) loses its KV, to recompute later."""
        self.unqueued.add(i)
        self.kv.preempt(i)
        self._requeue(i)

    def finish_early(self, i: int, reason: str) -> None:
        """Decoding row `i` ends now, its output kept (its KV released in the projection)."""
        self.decode.remove(i)
        self.finish.append((i, reason))

    def spill_out(self, i: int) -> None:
        """Decoding row `i` went to the CPU tier (in the projection): it stops decoding."""
        self.decode.remove(i)
        self.spill.append(i)
        self.spilled.append(i)

    def restore_in(self, i: int) -> None:
        """Spilled row `i` (the first in the tier) came back (in the projection): it decodes."""
        self.spilled.remove(i)
        if i in self.spill:  # spilled earlier in this very plan: the two cancel out
            self.spill.remove(i)
        else:
            self.restore.append(i)
        requests = self.requests
        self.decode.add(i, next_token_deadline_s(requests, i), int(requests.num_computed[i]),
                        float(requests.weight[i]))

    def plan(self, decode: tuple[int, ...], prefill: tuple[tuple[int, int], ...],
             kernels: tuple[str, ...]) -> StepPlan:
        """The step's plan: the computing rows given, and the actions drafted."""
        return StepPlan(decode=decode, prefill=prefill, preempt=tuple(self.preempt),
                        finish=tuple(self.finish), spill=tuple(self.spill),
                        restore=tuple(self.restore), quantize=tuple(self.quantize),
                        kernels=kernels)
