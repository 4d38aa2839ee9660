"""Prefill-first: a step is all prefill whenever a prompt waits, else all decode.

Mirrors vLLM v0's default scheduler before chunked prefill (and Orca-style iteration-level
scheduling): waiting prompts are prefilled whole, in arrival order, batched up to the token
budget (a prompt longer than the budget runs alone); only when no prompt can start do the
running requests decode, all together. Prompts therefore stall decodes: the TPOT cost that
chunked prefill was invented to remove. KV exhaustion during decode preempts the most recently
started request.
"""

from __future__ import annotations

from refimpl.sched.plan import StepPlan
from refimpl.sched.policy import QueuePolicy
from refimpl.sched.request import Request, RequestStatus

__all__ = ["PrefillFirstPolicy"]


class PrefillFirstPolicy(QueuePolicy):
    """Whole-prompt prefills take priority over decodes."""

    name = "prefill-first"

    def schedule(self, now_s: float) -> StepPlan:
        """Plan one step."""
        prefill = []
        budget, free = self.token_budget, self.kv.num_free_pages
        while self.waiting and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            tokens = request.num_uncomputed
            need = self.kv.pages_needed(request, tokens)
            if need > free or (prefill and tokens > budget):
                break
            self.admit(request)
            free -= need
            budget -= tokens
            prefill.append((request, tokens))
        if prefill:
            return StepPlan((), tuple(prefill))
        # No prompt could start: every running request decodes (the budget does not cap
        # decodes here, as in vLLM v0 where max_num_seqs bounds the decode batch).
        return StepPlan(self._decode_all(), ())

    def _decode_all(self) -> tuple[Request, ...]:
        """All running requests decode, preempting the newest while the pages do not fit."""
        free = self.kv.num_free_pages
        decode = []
        for request in list(self.running):  # victims come from the back: never one already in
            if request.status is not RequestStatus.RUNNING:
                continue
            need = self.kv.pages_needed(request, 1)
            while need > free and request.status is RequestStatus.RUNNING:
                victim = self.running[-1]
                free += self.kv.pages_held(victim)
                self.preempt(victim)
            if request.status is RequestStatus.RUNNING:
                free -= need
                decode.append(request)
        return tuple(decode)
