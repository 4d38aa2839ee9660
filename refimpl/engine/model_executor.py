"""`ModelExecutor`: runs each step's plan on a real model over the run's paged KV, and times it.

It takes the step model's place in the one serving loop (refimpl.engine.loop). When it is
called, `prepare` has already made the KV books what the plan says (pages restored, quantized,
spilled, dropped, grown); the executor makes the K/V data follow the books, then runs the
forward pass with the page tables the books hold, so every K/V write and read goes through the
pages the scheduler manages:
1. spilled requests' rows are copied to the CPU tier from the pages they held (kept from the
   last step they ran: the books have released them, but nothing has overwritten them yet, as
   only this step's forward pass writes pages);
2. quantized requests are repacked into the first pages of their table, the ones the books keep;
3. restored requests are written back into their new pages;
4. dropped (preempted) and ended requests forget their format and CPU-tier copy;
5. the decodes and prefill chunks run as one batch (`model.step`) with the tiles the plan
   picked from the cost table (the pick of the step's first decode bucket for every decode,
   the prefill pick for the chunks: a prefill tile of `tile_k` keys reads `tile_k / P`
   pages), and each sequence whose computed tokens reach its known tokens samples its next
   token.
A request's tokens are its prompt (seeded, or given) followed by what it generated, so a
preempted request recomputes exactly the tokens it had (vLLM's recompute preemption). The
step's wall time, all five parts, is what the clock advances by; the step model's prediction
for the same counts, made before the step ran and corrected online by a `Calibrator`, is
recorded beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from refimpl.costmodel.calibrate import Calibrator
from refimpl.costmodel.choose import compiled_coefficients
from refimpl.costmodel.step import StepTimeModel
from refimpl.costmodel.table import CostTable
from refimpl.engine.executor import MEASURED, NO_COEFFICIENTS
from refimpl.engine.prompts import seeded_prompt
from refimpl.errors import ConfigError, KVCacheError
from refimpl.kv.manager import KVState
from refimpl.kv.storage import QUANTIZE_FACTOR, KVStorage
from refimpl.model import LlamaModel, SeqSlice
from refimpl.sched import plan as p
from refimpl.sched.plan import PlanArrays
from refimpl.sched.table import COMPUTED, GENERATED, PROMPT, REQUEST_ID

__all__ = ["ModelExecutor", "Slowdown", "StepLog"]

TokenCallback = Callable[[int, int, int], None]  # (request id, token, its index in the output)


@dataclass(frozen=True)
class Slowdown:
    """Drift to inject: from step `after_step` on, every step takes `factor` times as long."""

    after_step: int
    factor: float

    def __post_init__(self) -> None:
        if isinstance(self.after_step, bool) or not isinstance(self.after_step, int) \
                or self.after_step < 0:
            raise ConfigError("slowdown.after_step", self.after_step, "must be an int >= 0")
        if not 1.0 <= self.factor < 100.0:
            raise ConfigError("slowdown.factor", self.factor, "must be in [1, 100)")


class StepLog:
    """Per step: the four counts, the offline and calibrated predictions, the measured time."""

    FIELDS = ("prefill_tokens", "prefill_pairs", "decode_seqs", "decode_context_tokens",
              "offline_s", "predicted_s", "measured_s")

    def __init__(self) -> None:
        self.rows: list[tuple[float, ...]] = []

    def columns(self) -> dict[str, np.ndarray]:
        """Each field as an array, one entry per executed step."""
        table = np.array(self.rows, dtype=np.float64).reshape(-1, len(self.FIELDS))
        return {name: table[:, k].copy() for k, name in enumerate(self.FIELDS)}


class ModelExecutor:
    """Executes each plan on `model` over the pool's K/V storage; returns measured seconds."""

    code = MEASURED

    def __init__(self, model: LlamaModel, step_model: StepTimeModel, *, seed: int = 0,
                 temperature: float = 0.0, prompts: Mapping[int, Sequence[int]] | None = None,
                 calibrator: Calibrator | None = None, slowdown: Slowdown | None = None,
                 on_token: TokenCallback | None = None, cost_table: CostTable | None = None
                 ) -> None:
        if not temperature >= 0.0:
            raise ConfigError("temperature", temperature, "must be >= 0 (0: greedy)")
        self.model, self.step_model = model, step_model
        # what the compiled policies (`slo`, `edf`'s guard) plan with; the clock is measured
        self.coefficients = compiled_coefficients(step_model) or NO_COEFFICIENTS
        self.seed, self.temperature = seed, float(temperature)
        self.prompts = dict(prompts or {})
        self.calibrator = calibrator if calibrator is not None else Calibrator()
        self.slowdown, self.on_token = slowdown, on_token
        self._kernel_params = {  # tile options of every candidate a plan may name
            c.name: dict(c.params) for phase in (cost_table.phases.values() if cost_table
                                                  else ()) for c in phase.candidates}
        self.storage: KVStorage | None = None
        self.log = StepLog()
        self.outputs: dict[int, list[int]] = {}  # request id -> generated tokens
        self._tokens: dict[int, list[int]] = {}  # row -> prompt + generated tokens
        self._tables: dict[int, np.ndarray] = {}  # row -> its pages when it last ran
        self._rngs: dict[int, np.random.Generator] = {}

    def attach(self, storage: KVStorage) -> None:
        """Use `storage` (the run's pool's K/V arrays) from the next step on; forget the last
        run's requests."""
        if storage.quantized_format not in ("int8", "fp8_e4m3"):
            raise KVCacheError("storage.quantized_format", storage.quantized_format,
                               "unknown format")
        self.storage = storage
        self.log = StepLog()
        self.outputs, self._tokens, self._tables, self._rngs = {}, {}, {}, {}

    # ---- the loop's call ---------------------------------------------------------------------
    def execute(self, plan: PlanArrays, arrays, kernel_names: Sequence[str] = ()) -> float:
        """Carry out `plan` on the data and run its forward pass (`kernel_names`: the run's
        names of the plan's kernel codes); returns the seconds taken."""
        if self.storage is None:
            raise KVCacheError("storage", None, "attach() the pool's storage before a run")
        counts = _counts(plan, arrays.ints)
        predicted = self.step_model.step_time_parts(*counts)
        phase, batch, tokens = _bucket(plan, counts)
        corrected = predicted * self.calibrator.correction(phase, batch, tokens)
        started = time.perf_counter()
        self._follow_books(plan, arrays.ints, arrays.kv)
        self._forward(plan, arrays.ints, arrays.kv, self._tiles(plan, kernel_names))
        measured = time.perf_counter() - started
        if self.slowdown is not None and len(self.log.rows) >= self.slowdown.after_step:
            measured = _spin_until(started, measured * self.slowdown.factor)
        if predicted > 0.0:
            self.calibrator.observe_ratio(phase, batch, tokens, measured / predicted)
        self.log.rows.append((*counts, predicted, corrected, measured))
        return measured

    def _follow_books(self, plan: PlanArrays, ints: np.ndarray, kv: KVState) -> None:
        """Make the K/V data follow the plan's tier moves and drops (books already moved)."""
        entries, sizes, storage = plan.entries, plan.sizes, self.storage
        for k in range(sizes[p.NUM_SPILL]):
            i = int(entries[p.SPILL, k])
            storage.on_spill(i, self._tables[i].tolist(), int(ints[COMPUTED, i]))
        for k in range(sizes[p.NUM_QUANTIZE]):
            i = int(entries[p.QUANTIZE, k])
            if entries[p.QUANTIZE_FACTOR, k] != QUANTIZE_FACTOR:
                raise KVCacheError("plan.quantize factor", int(entries[p.QUANTIZE_FACTOR, k]),
                                   f"float32 pages repack {QUANTIZE_FACTOR}x into 8 bits")
            storage.on_quantize(i, self._tables[i].tolist(), int(ints[COMPUTED, i]))
            self._tables[i] = _table(kv, i)
        for k in range(sizes[p.NUM_RESTORE]):
            i = int(entries[p.RESTORE, k])
            self._tables[i] = _table(kv, i)
            storage.on_restore(i, self._tables[i].tolist(), int(ints[COMPUTED, i]))
        for rows, count in ((p.PREEMPT, p.NUM_PREEMPT), (p.FINISH, p.NUM_FINISH)):
            for k in range(sizes[count]):
                i = int(entries[rows, k])
                storage.on_free(i)
                self._tables.pop(i, None)

    def _tiles(self, plan: PlanArrays, kernel_names: Sequence[str]) -> dict[str, dict]:
        """The kernel options of the plan's picks, by the model's attention call."""
        tiles: dict[str, dict] = {}
        for code in plan.kernels[:plan.sizes[p.NUM_KERNELS]]:
            name = kernel_names[code]
            params = self._kernel_params.get(name)
            if params is None:
                raise ConfigError("plan.kernels", name, "names no candidate of the cost table")
            phase = name.split("/", 1)[0]
            if phase == "decode":
                tiles.setdefault("decode", params)
            elif phase == "chunk":
                tiles.setdefault("chunk", params)
            else:  # a contiguous-prefill tile, read as the paged chunk kernel's
                tiles.setdefault("chunk", {
                    "tile_q": params["tile_q"], "heads_per_tile": params["heads_per_tile"],
                    "pages_per_tile": max(params["tile_k"] // self.storage.page_size, 1)})
        return tiles

    def _forward(self, plan: PlanArrays, ints: np.ndarray, kv: KVState,
                 tiles: dict[str, dict]) -> None:
        """One forward pass over the plan's decodes and chunks; sample where a token is due."""
        entries, sizes = plan.entries, plan.sizes
        work = [(int(entries[p.DECODE, k]), 1) for k in range(sizes[p.NUM_DECODE])]
        work += [(int(entries[p.PREFILL, k]), int(entries[p.PREFILL_TOKENS, k]))
                 for k in range(sizes[p.NUM_PREFILL])]
        seqs, due = [], []
        for i, n in work:
            tokens = self._sequence(i, ints)
            start = int(ints[COMPUTED, i])
            table = _table(kv, i)
            self._tables[i] = table
            want = start + n == int(ints[PROMPT, i] + ints[GENERATED, i])
            seqs.append(SeqSlice(i, np.asarray(tokens[start:start + n], np.int64), start,
                                 table, want))
            if want:
                due.append(i)
        logits = self.model.step(self.storage, seqs, tiles=tiles)
        for row, i in zip(logits, due, strict=True):
            self._emit(i, ints, self._sample(i, ints, row))

    def _sequence(self, i: int, ints: np.ndarray) -> list[int]:
        """Row `i`'s known tokens: its prompt, then what it generated."""
        tokens = self._tokens.get(i)
        if tokens is None:
            request_id, length = int(ints[REQUEST_ID, i]), int(ints[PROMPT, i])
            prompt = self.prompts.get(request_id)
            if prompt is None:
                prompt = seeded_prompt(self.seed, request_id, length,
                                       self.model.config.vocab_size)
            elif len(prompt) != length:
                raise ConfigError(f"prompts[{request_id}]", len(prompt),
                                  f"must hold the request's {length} prompt tokens")
            tokens = self._tokens[i] = [int(t) for t in prompt]
            self.outputs[request_id] = []
        return tokens

    def _sample(self, i: int, ints: np.ndarray, logits: np.ndarray) -> int:
        """Greedy, or at `temperature` from a generator seeded per request (so a request's
        tokens do not depend on what it was batched with)."""
        if self.temperature == 0.0:
            return int(np.argmax(logits))
        request_id = int(ints[REQUEST_ID, i])
        rng = self._rngs.get(request_id)
        if rng is None:
            rng = self._rngs[request_id] = np.random.default_rng([self.seed, request_id, 1])
        z = (logits - logits.max()) / self.temperature
        weights = np.exp(z)
        return int(rng.choice(len(weights), p=weights / weights.sum()))

    def _emit(self, i: int, ints: np.ndarray, token: int) -> None:
        self._tokens[i].append(token)
        request_id = int(ints[REQUEST_ID, i])
        output = self.outputs[request_id]
        output.append(token)
        if self.on_token is not None:
            self.on_token(request_id, token, len(output) - 1)


def _table(kv: KVState, i: int) -> np.ndarray:
    """Request `i`'s page ids now, in order (a copy)."""
    slot = kv.slot_of[i]
    return kv.tables[slot, :kv.num_pages_of[slot]].astype(np.int64)


def _counts(plan: PlanArrays, ints: np.ndarray) -> tuple[int, int, int, int]:
    """The step's (prefill tokens, causal pairs, decode sequences, decode context tokens)."""
    entries, sizes = plan.entries, plan.sizes
    rows = entries[p.PREFILL, :sizes[p.NUM_PREFILL]]
    chunk = entries[p.PREFILL_TOKENS, :sizes[p.NUM_PREFILL]]
    done = ints[COMPUTED, rows]
    decode = entries[p.DECODE, :sizes[p.NUM_DECODE]]
    return (int(chunk.sum()), int((chunk * done + chunk * (chunk + 1) // 2).sum()),
            len(decode), int((ints[PROMPT, decode] + ints[GENERATED, decode]).sum()))


def _bucket(plan: PlanArrays, counts: tuple[int, int, int, int]) -> tuple[str, int, int]:
    """The calibrator's key of a step: its phase, sequences and new tokens."""
    chunks, decodes = int(plan.sizes[p.NUM_PREFILL]), counts[2]
    phase = "decode" if chunks == 0 else "prefill" if decodes == 0 else "mixed"
    return phase, chunks + decodes, counts[0] + decodes


def _spin_until(started: float, seconds: float) -> float:
    """Busy-wait until `seconds` after `started` (sleep is too coarse for ms steps)."""
    while time.perf_counter() - started < seconds:
        pass
    return time.perf_counter() - started
