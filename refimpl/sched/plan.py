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

    def __bool__(self) -> bool:
        return bool(self.decode or self.prefill)

    @property
    def num_tokens(self) -> int:
        """Tokens computed by the step, decode and prefill together."""
        return len(self.decode) + sum(tokens for _, tokens in self.prefill)
