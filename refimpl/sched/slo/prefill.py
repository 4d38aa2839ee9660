"""The `slo` policy's prompt chunks: the adaptive chunk in the slack the decodes leave.

The chunk `C` is the largest number of prompt tokens whose step still fits the tick budget
(binary search on the monotone step time), within `max_chunk` and the free pages; prompts take
it in `PrefillQueue` order, each whole before the next starts, so several short prompts share a
tick and a long one is chunked; the first prompt that does not fit whole ends the walk. Tight
decode slack or a big decode backlog shrink `C`; loose slack grows it. Above the KV watermark
no new prompt starts while decodes run (they free pages as they finish; with nothing decoding,
holding back would only stall). Nor does one while the decode set it would join is full
(`max_batch`, as vLLM's `max_num_seqs`): decodes past one batch would split every TPOT period
into more steps, each paying the weights read for a few tokens, and leave prompts no time.
At most `MAX_HEADS` prompts are looked at per tick.

When nothing at all can run and the pool is full of half-done prompts, the last-queued prompt
holding pages (latest deadline, then highest id) is preempted so that another can run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from refimpl.sched.slo.draft import TickDraft

__all__ = ["MAX_HEADS", "choose_prefill", "partial_prefill_victim"]

MAX_HEADS = 64  # prompts a tick looks at in the prefill queue


def choose_prefill(policy, draft: TickDraft, step_model, budget_s: float, num_decode: int,
                   decode_context: int, pages_left: int, hold_new: bool
                   ) -> list[tuple[int, int]]:
    """Prompt chunks `(row, tokens)` in queue order: the most tokens whose step fits the
    budget and `pages_left` (module doc)."""
    kv = draft.kv
    held_back = hold_new and kv.utilization() > policy.kv_watermark
    step = step_model.step_time_parts
    page_size, max_chunk = kv.page_size, policy.max_chunk

    def grown(take: int, computed: int, held: int) -> tuple[int, int]:
        """(pairs, new pages) of a chunk of `take` tokens after `computed` cached ones."""
        return (take * computed + take * (take + 1) // 2,
                -(-(computed + take) // page_size) - held)

    chunks: list[tuple[int, int]] = []
    tokens = pairs = pages = 0
    looked = 0
    room = policy.max_batch - len(draft.decode)  # prompts that may still join the decodes
    waiting = draft.waiting()
    requests = draft.requests
    for _, i in waiting:
        if tokens >= max_chunk or looked >= MAX_HEADS:
            break
        looked += 1  # bounded: a queue held back at the watermark costs a bounded look
        new = not kv.holds_slot(i)
        if new and (held_back or room <= 0):  # no new prompt starts above the mark
            continue
        computed, held = kv.num_computed(i), kv.pages_held(i)

        def fits(take: int, base=(tokens, pairs, pages), computed=computed, held=held) -> bool:
            more_pairs, more_pages = grown(take, computed, held)
            return (base[2] + more_pages <= pages_left and step(
                base[0] + take, base[1] + more_pairs, num_decode, decode_context)
                <= budget_s)

        uncomputed = int(requests.prompt_tokens[i] + requests.num_generated[i]) - computed
        low, high = 0, min(uncomputed, max_chunk - tokens)
        cut_short = not fits(high)
        if cut_short:
            while low < high:  # the largest part of this prompt that fits
                mid = (low + high + 1) // 2
                low, high = (mid, high) if fits(mid) else (low, mid - 1)
        if high == 0:
            break
        chunks.append((i, high))
        room -= new
        more_pairs, more_pages = grown(high, computed, held)
        tokens, pairs, pages = tokens + high, pairs + more_pairs, pages + more_pages
        if cut_short:
            break  # later prompts wait: queue order holds
    return chunks


def partial_prefill_victim(draft: TickDraft) -> int:
    """The last-queued prompt holding pages, -1 unless two or more hold some (a lone prompt
    always fits: the loop checked it at arrival)."""
    kv = draft.kv
    holders = [(key[0], key[4], i) for key, i in draft.queued_entries() if kv.holds_slot(i)]
    if len(holders) < 2:
        return -1
    return max(holders)[2]
