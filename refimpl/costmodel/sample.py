"""One profiled measurement: a candidate's time on one shape."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Sample"]


@dataclass(frozen=True)
class Sample:
    """The measured time of one candidate on one shape."""

    phase: str
    candidate: str  # Candidate.name
    batch: int
    seq_len: int
    time_s: float  # median of the timed calls of the quickest round
    min_s: float  # fastest timed call of all rounds: what the fit uses (load only adds time)
    ragged: bool = False  # a decode shape of `ragged_context_lens(batch, seq_len)` contexts
    # The second-fastest round's fastest call over `min_s`, less 1 (NaN: timed in one round):
    # how closely another round reproduced the time the fit uses, a floor under any model's
    # error.
    spread: float = math.nan
