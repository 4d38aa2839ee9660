"""The errors refimpl raises on bad input.

Every error is a `ValueError` (so callers that already catch bad values keep working) and
names the offending field and its value; where the valid choices form a short list, the
message lists them. One subclass per area lets callers catch, say, only trace problems.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "CapacityError",
    "ConfigError",
    "GradingError",
    "KVCacheError",
    "KernelInputError",
    "ModelInputError",
    "RefimplError",
    "SchedulingError",
    "TraceFormatError",
]


class RefimplError(ValueError):
    """Bad input to refimpl: the message names the field, the value and what is wrong."""

    def __init__(
        self,
        field: str,
        value: object,
        problem: str,
        *,
        choices: Iterable[object] | None = None,
        where: str | None = None,
    ) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.choices = tuple(choices) if choices is not None else None
        self.where = where
        message = f"{field}={value!r}: {problem}"
        if self.choices is not None:
            message += f" (choose from: {', '.join(str(c) for c in self.choices)})"
        if where is not None:
            message = f"{where}: {message}"
        super().__init__(message)

    def __reduce__(self):  # keep errors picklable across processes (the grader, pools)
        return (
            _rebuild,
            (type(self), self.field, self.value, self.problem, self.choices, self.where),
        )


def _rebuild(cls, field, value, problem, choices, where):
    return cls(field, value, problem, choices=choices, where=where)


class ConfigError(RefimplError):
    """An impossible or unknown configuration: a preset name, a dimension, a dtype."""


class TraceFormatError(RefimplError):
    """A malformed workload file; `where` gives the file and line."""


class KernelInputError(RefimplError):
    """Arrays handed to a kernel with the wrong dtype, shape, layout or values."""


class ModelInputError(RefimplError):
    """Bad input to the model: a checkpoint with a missing or mis-shaped tensor, or a step's
    sequence with a token, position or page table out of range."""


class CapacityError(RefimplError):
    """A request or table that cannot fit: more tokens, pages or SRAM than there are."""


class KVCacheError(RefimplError):
    """A page-pool call that does not fit the pool's state: an unknown or already-freed request."""


class SchedulingError(RefimplError):
    """A policy's plan that breaks the plan contract: an unknown request, a request twice,
    more KV pages than are free, a zero-token chunk."""


class GradingError(RefimplError):
    """An unknown exercise, a missing solution file, or a missing exercises folder."""
