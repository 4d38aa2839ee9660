"""The plan of one engine step: which requests compute how many tokens.

A policy returns a `StepPlan`; the executor runs it; the engine commits the result. Only the
commit changes a request's token counts, so a plan is a plain value that can be inspected,
logged or replayed.
"""

from __future__ import annotations

from dataclasses import dataclass

from refimpl.sched.request import Request

__all__ = ["StepPlan"]


@dataclass(frozen=True, slots=True)
class StepPlan:
    """Work of one step: decoding requests (one token each) and prompt chunks."""

    decode: tuple[Request, ...] = ()
    prefill: tuple[tuple[Request, int], ...] = ()  # (request, tokens computed this step)
    kernels: tuple[str, ...] = ()  # kernel candidates chosen for the step, if the policy picks
    finish: tuple[tuple[Request, str], ...] = ()  # requests the policy ends now, with a reason
    extra_s: float = 0.0  # time the step spends besides computing (KV spills and restores)

    def __bool__(self) -> bool:
        return bool(self.decode or self.prefill or self.finish or self.extra_s)

    @property
    def num_tokens(self) -> int:
        """Tokens computed by the step, decode and prefill together."""
        return len(self.decode) + sum(tokens for _, tokens in self.prefill)
