"""The run's requests as a table of arrays: what policies read and only the commit writes.

`Request` objects are the input and the output of a run; while it runs, every request is a
column of two 2-D arrays, `ints[FIELD, i]` (int64) and `floats[FIELD, i]` (float64), `i` its
row in arrival order. Struct-of-arrays so that compiled code holds two arrays, not twenty
(Numba counts a reference per array argument, about 5 ns each, on every call), and so that a
plain-Python policy reads the same memory through NumPy views (`RequestTable`). A finish or
rejection reason is a code into `REASONS`; reasons a user's gate or policy invents are added
after the built-in ones, per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Real

import numpy as np

from refimpl.config.slo import SLO
from refimpl.errors import ConfigError
from refimpl.sched.request import Request, RequestStatus

__all__ = ["REASONS", "NameCodes", "RequestTable", "arrival_order", "new_requests", "write_back"]

WAITING, RUNNING, FINISHED, REJECTED = (int(s) for s in RequestStatus)

# Every reason a request ends or is refused for; index 0 is "no reason yet".
REASONS = ("", "completed", "length_capped", "exceeds_context", "exceeds_kv_capacity",
           "unschedulable", "ttft_capacity", "tpot_capacity", "delays_admitted",
           "kv_watermark", "queue_full", "queue_timeout", "ttft_unattainable", "max_running")
(NO_REASON, COMPLETED, LENGTH_CAPPED, EXCEEDS_CONTEXT, EXCEEDS_KV_CAPACITY, UNSCHEDULABLE,
 TTFT_CAPACITY, TPOT_CAPACITY, DELAYS_ADMITTED, KV_WATERMARK, QUEUE_FULL, QUEUE_TIMEOUT,
 TTFT_UNATTAINABLE, MAX_RUNNING) = range(14)  # (`edf`'s TTFT guard: unattainable even alone)

# Rows of `ints`, then of `floats`, each in `Request` field names.
INT_FIELDS = ("status", "prompt_tokens", "max_new_tokens", "num_computed", "num_generated",
              "reason", "num_preemptions", "priority", "request_id", "output_cap")
FLOAT_FIELDS = ("arrival_s", "ttft_slo_s", "tpot_slo_s", "weight", "first_scheduled_s",
                "first_token_s", "last_token_s", "finish_s")
(STATUS, PROMPT, MAX_NEW, COMPUTED, GENERATED, REASON, PREEMPTIONS, PRIORITY, REQUEST_ID,
 OUTPUT_CAP) = range(len(INT_FIELDS))
(ARRIVAL, TTFT_SLO, TPOT_SLO, WEIGHT, FIRST_SCHEDULED, FIRST_TOKEN, LAST_TOKEN,
 FINISH) = range(len(FLOAT_FIELDS))
# `output_cap`: output tokens after which the request ends `length_capped` (-1: none; set by
# admission's degrade).


class NameCodes:
    """A run's table of names as codes (finish reasons, kernel candidates): the names it
    starts with, then any new ones, each the next code."""

    def __init__(self, names: Sequence[str] = REASONS) -> None:
        self.names = list(names)
        self._code = {name: code for code, name in enumerate(self.names)}

    def code(self, name: str) -> int:
        """The code of `name`, a new one if it is new to this run."""
        code = self._code.get(name)
        if code is None:
            code = self._code[name] = len(self.names)
            self.names.append(name)
        return code



# What each integer a request asks for may be: token counts far beyond any model's context,
# yet small enough that a run's sums of them (prompt + output, pages) stay within int64.
MAX_TOKENS = 2**40
_INT_INPUTS = ((PROMPT, "prompt_tokens", 1, MAX_TOKENS), (MAX_NEW, "max_new_tokens", 1, MAX_TOKENS),
               (PRIORITY, "priority", 0, MAX_TOKENS), (REQUEST_ID, "request_id", -2**63, 2**63 - 1))


def arrival_order(requests: Sequence[Request]) -> list[Request]:
    """`requests` by (arrival, id), each first checked to be a `Request` whose fields have
    the right types (`new_requests` then checks their values)."""
    for request in requests:
        if not isinstance(request, Request):
            raise ConfigError("requests", type(request).__name__, "must hold refimpl.Request "
                              "objects")
        for _, name, _, _ in _INT_INPUTS:
            value = getattr(request, name)
            if isinstance(value, bool) or not isinstance(value, Integral):
                _refuse(request, name, value, "must be an integer")
        for name in ("arrival_s", "weight"):
            value = getattr(request, name)
            if isinstance(value, bool) or not isinstance(value, Real):
                _refuse(request, name, value, "must be a number")
        if not isinstance(request.slo, SLO):
            _refuse(request, "slo", request.slo, "must be a refimpl.SLO")
        if not isinstance(request.slo_class, str):
            _refuse(request, "slo_class", request.slo_class, "must be a string")
    return sorted(requests, key=lambda r: (r.arrival_s, r.request_id))


def new_requests(requests: Sequence[Request]) -> tuple[np.ndarray, np.ndarray]:
    """The `ints` and `floats` tables of `requests` (from `arrival_order`), from what they
    ask for; every request starts fresh (waiting, nothing computed), whatever an earlier run
    left in the objects. A field no run could serve raises `ConfigError` naming the request."""
    n = len(requests)
    ints = np.zeros((len(INT_FIELDS), n), dtype=np.int64)
    floats = np.full((len(FLOAT_FIELDS), n), np.nan)
    for row, name, low, high in _INT_INPUTS:
        values = [getattr(r, name) for r in requests]
        for k, value in enumerate(values):
            if not low <= value <= high:
                _refuse(requests[k], name, value,
                        f"must be at least {low}" if value < low else f"must be at most {high}")
        ints[row] = values
    ints[STATUS] = WAITING
    ints[OUTPUT_CAP] = -1  # set by a gate's degrade during the run
    floats[ARRIVAL] = [r.arrival_s for r in requests]
    floats[TTFT_SLO] = [r.slo.ttft_s for r in requests]
    floats[TPOT_SLO] = [r.slo.tpot_s for r in requests]
    floats[WEIGHT] = [r.weight for r in requests]
    for row, field, problem in ((floats[ARRIVAL], "arrival_s", "must be a finite time >= 0"),
                                (floats[WEIGHT], "weight", "must be a finite number > 0")):
        ok = np.isfinite(row) & ((row >= 0) if field == "arrival_s" else (row > 0))
        if not ok.all():
            k = int(np.flatnonzero(~ok)[0])
            _refuse(requests[k], field, float(row[k]), problem)
    ids, first = np.unique(ints[REQUEST_ID], return_index=True)
    if len(ids) < n:
        k = int(np.setdiff1d(np.arange(n), first)[0])
        _refuse(requests[k], "request_id", int(ints[REQUEST_ID, k]), "appears twice in the run")
    return ints, floats


def _refuse(request: Request, field: str, value: object, problem: str) -> None:
    raise ConfigError(field, value, problem, where=f"request {request.request_id!r}")


def write_back(ints: np.ndarray, floats: np.ndarray, reasons: NameCodes,
               requests: Sequence[Request]) -> None:
    """Copy a run's results from the tables into the `Request` objects."""
    columns = {name: ints[INT_FIELDS.index(name)].tolist() for name in (
        "num_computed", "num_generated", "num_preemptions")}
    columns.update({name: floats[FLOAT_FIELDS.index(name)].tolist() for name in (
        "first_scheduled_s", "first_token_s", "last_token_s", "finish_s")})
    status, reason = ints[STATUS].tolist(), ints[REASON].tolist()
    caps = ints[OUTPUT_CAP].tolist()
    for k, request in enumerate(requests):
        request.status = RequestStatus(status[k])
        request.finish_reason = reasons.names[reason[k]]
        request.output_cap = None if caps[k] < 0 else caps[k]
        for name, values in columns.items():
            setattr(request, name, values[k])


class RequestTable:
    """Read-only NumPy views of a run's request table, by `Request` field name.

    What a plain-Python policy or gate reads: `table.num_computed[i]` is the live value of
    request `i` (the same memory the compiled loop writes). Views are read-only: only the
    commit changes a request.
    """

    def __init__(self, ints: np.ndarray, floats: np.ndarray, slos: Sequence[SLO]) -> None:
        for table, names in ((ints, INT_FIELDS), (floats, FLOAT_FIELDS)):
            for row, name in enumerate(names):
                view = table[row]
                view.flags.writeable = False
                setattr(self, name, view)
        self.slos = slos  # each request's SLO object, by row

    def __len__(self) -> int:
        return len(self.arrival_s)

    def num_tokens(self, i: int | np.ndarray) -> int | np.ndarray:
        """Tokens known of request `i` (or of each row in an array): its prompt and the
        output generated so far."""
        return self.prompt_tokens[i] + self.num_generated[i]

    def num_uncomputed(self, i: int | np.ndarray) -> int | np.ndarray:
        """Tokens a step could still schedule for request `i` (or each row in an array)
        before its next output token."""
        return self.prompt_tokens[i] + self.num_generated[i] - self.num_computed[i]

    def row(self, i: int) -> RequestRow:
        """Request `i` as an object with `Request`'s field names (read live)."""
        return RequestRow(self, int(i))


class RequestRow:
    """One request of a `RequestTable`, read with `Request`'s attribute names."""

    __slots__ = ("_table", "i")

    def __init__(self, table: RequestTable, i: int) -> None:
        self._table, self.i = table, i

    def __getattr__(self, name: str):
        return getattr(self._table, name)[self.i].item()

    @property
    def slo(self) -> SLO:
        """The request's SLO."""
        return self._table.slos[self.i]

    @property
    def num_tokens(self) -> int:
        """Tokens known so far: the prompt and the output generated."""
        return int(self._table.num_tokens(self.i))

    @property
    def is_finished(self) -> bool:
        """Whether the request reached a terminal state."""
        return int(self._table.status[self.i]) >= FINISHED
