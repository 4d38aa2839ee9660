"""What one engine step asks of the model, checked and laid out once for all layers.

The executor hands `LlamaModel.step` a `SeqSlice` per sequence. `plan_step` validates them
against the model and the storage (`ModelInputError` naming the sequence and field) and works
out, once per step rather than once per layer, where each new row goes: its position (for
RoPE), its page slot (for the K/V write), and which attention call reads it.

Page tables follow `KVStorage`: a float request's page holds P tokens; once the pool has
quantized it (`KVStorage.is_quantized`), each of its pages holds 4P tokens of 8-bit codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from refimpl.errors import ModelInputError
from refimpl.kv.storage import QUANTIZE_FACTOR, KVStorage
from refimpl.model.config import LlamaConfig

__all__ = ["DecodeGroup", "SeqSlice", "Span", "StepPlan", "plan_step"]


@dataclass(frozen=True)
class SeqSlice:
    """One sequence's part of an engine step: `tokens` at positions [start, start + n).

    `start` is the request's computed tokens (its K/V already in the pages); `page_table` is
    the pool's current table of the request, which must already cover start + n tokens (P a
    page, 4P once the request is quantized). A prefill chunk and a decode are the same thing
    with n > 1 and n == 1; `want_logits` is for the chunk that ends the prompt, and decodes.
    """

    request_id: int  # key into KVStorage (its quantized-format look-up)
    tokens: np.ndarray  # int64 (n,) new token ids
    start: int  # tokens of this sequence already in its KV pages
    page_table: np.ndarray  # int64 page ids, enough for start + n tokens, allocated by the caller
    want_logits: bool  # return the logits of the last position


@dataclass(frozen=True, eq=False)
class Span:
    """One sequence's rows [row_start, row_end) of the step's batch."""

    request_id: int
    row_start: int
    row_end: int
    start: int  # position of its first new token
    block_table: np.ndarray  # int64: the pages holding positions [0, start + n)
    quantized: bool


@dataclass(frozen=True, eq=False)
class DecodeGroup:
    """The single-token sequences of one KV format, for one `decode_attention` call."""

    rows: np.ndarray  # (B,) their rows in the step's batch
    block_tables: np.ndarray  # (B, max pages) int64, zero-padded past each sequence's pages
    context_lens: np.ndarray  # (B,) int64: tokens including the new one
    quantized: bool


@dataclass(frozen=True, eq=False)
class StepPlan:
    """A validated step: the flattened rows and where each goes."""

    tokens: np.ndarray  # (N,) int64 token ids, sequence after sequence
    positions: np.ndarray  # (N,) int64 absolute positions
    logit_rows: np.ndarray  # (M,) rows whose logits are returned, in sequence order
    float_rows: np.ndarray  # (Nf,) rows of float-format sequences ...
    float_pages: np.ndarray  # (Nf,) ... the page ...
    float_offsets: np.ndarray  # (Nf,) ... and the slot in it where their K/V go
    quantized_writes: tuple[Span, ...]  # sequences whose rows are written as 8-bit codes
    decodes: tuple[DecodeGroup, ...]
    chunks: tuple[Span, ...]  # sequences with more than one new token

    @property
    def has_quantized(self) -> bool:
        """Whether any sequence reads 8-bit pages."""
        return bool(self.quantized_writes)


def check_storage(config: LlamaConfig, storage: KVStorage) -> None:
    """The storage must be shaped for this model."""
    for field, want in (("num_layers", config.num_layers), ("num_kv_heads", config.num_kv_heads),
                        ("head_dim", config.head_dim)):
        if getattr(storage, field) != want:
            raise ModelInputError(f"storage.{field}", getattr(storage, field),
                                  f"must equal the model's {want}")


def _integer(field: str, value: object, low: int) -> int:
    """`value` as an int >= low."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ModelInputError(field, value, "must be an integer")
    if value < low:
        raise ModelInputError(field, value, f"must be >= {low}")
    return int(value)


def _index_vector(field: str, value: object) -> np.ndarray:
    """`value` as a non-empty 1-D int64 array."""
    array = np.asarray(value)
    if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.integer):
        raise ModelInputError(field, f"{array.dtype} shape {array.shape}",
                              "must be a non-empty 1-D integer array")
    return array.astype(np.int64, copy=False)


def _check_seq(config: LlamaConfig, storage: KVStorage, field: str, seq: object
               ) -> tuple[np.ndarray, int, np.ndarray, bool]:
    """(tokens, start, used pages, quantized) of one validated `SeqSlice`."""
    if not isinstance(seq, SeqSlice):
        raise ModelInputError(field, type(seq).__name__, "must be a SeqSlice")
    tokens = _index_vector(f"{field}.tokens", seq.tokens)
    if tokens.min() < 0 or tokens.max() >= config.vocab_size:
        bad = int(tokens[(tokens < 0) | (tokens >= config.vocab_size)][0])
        raise ModelInputError(f"{field}.tokens", bad, f"token id outside [0, {config.vocab_size})")
    start = _integer(f"{field}.start", seq.start, 0)
    end = start + tokens.size
    if end > config.max_context:
        raise ModelInputError(f"{field}.start", start, f"positions up to {end} exceed the "
                              f"model's max_context={config.max_context}")
    if not isinstance(seq.want_logits, (bool, np.bool_)):
        raise ModelInputError(f"{field}.want_logits", seq.want_logits, "must be True or False")
    quantized = storage.is_quantized(seq.request_id)
    page_tokens = storage.page_size * (QUANTIZE_FACTOR if quantized else 1)
    table = _index_vector(f"{field}.page_table", seq.page_table)
    need = -(-end // page_tokens)
    if table.size < need:
        raise ModelInputError(f"{field}.page_table", f"{table.size} pages", f"too short for "
                              f"{end} tokens at {page_tokens} tokens a page ({need} pages)")
    used = table[:need]
    if used.min() < 0 or used.max() >= storage.num_pages:
        bad = int(used[(used < 0) | (used >= storage.num_pages)][0])
        raise ModelInputError(f"{field}.page_table", bad,
                              f"page id outside the storage's [0, {storage.num_pages})")
    return tokens, start, used, quantized


def _decode_group(spans: list[Span], quantized: bool) -> DecodeGroup:
    """One `decode_attention` call's arguments for single-token spans of one format."""
    width = max(s.block_table.size for s in spans)
    tables = np.zeros((len(spans), width), dtype=np.int64)
    for b, span in enumerate(spans):
        tables[b, : span.block_table.size] = span.block_table
    return DecodeGroup(rows=np.array([s.row_start for s in spans], dtype=np.int64),
                       block_tables=tables,
                       context_lens=np.array([s.start + 1 for s in spans], dtype=np.int64),
                       quantized=quantized)


def plan_step(config: LlamaConfig, storage: KVStorage, seqs: Sequence[SeqSlice]) -> StepPlan:
    """Validate a step's sequences and lay out its rows (see `StepPlan`)."""
    check_storage(config, storage)
    spans, tokens, logit_rows, seen = [], [], [], set()
    row = 0
    for i, seq in enumerate(seqs):
        seq_tokens, start, table, quantized = _check_seq(config, storage, f"seqs[{i}]", seq)
        if seq.request_id in seen:
            raise ModelInputError(f"seqs[{i}].request_id", seq.request_id, "twice in one step")
        seen.add(seq.request_id)
        spans.append(Span(seq.request_id, row, row + seq_tokens.size, start, table, quantized))
        tokens.append(seq_tokens)
        row += seq_tokens.size
        if seq.want_logits:
            logit_rows.append(row - 1)
    floats = [s for s in spans if not s.quantized]
    float_positions = [np.arange(s.start, s.start + s.row_end - s.row_start) for s in floats]
    float_slots = _cat(float_positions)
    decodes = [_decode_group(group, quantized) for quantized in (False, True)
               if (group := [s for s in spans if s.row_end - s.row_start == 1
                             and s.quantized == quantized])]
    return StepPlan(
        tokens=_cat(tokens),
        positions=_cat([np.arange(s.start, s.start + s.row_end - s.row_start) for s in spans]),
        logit_rows=np.array(logit_rows, dtype=np.int64),
        float_rows=_cat([np.arange(s.row_start, s.row_end) for s in floats]),
        float_pages=_cat([s.block_table[p // storage.page_size]
                          for s, p in zip(floats, float_positions, strict=True)]),
        float_offsets=float_slots % storage.page_size,
        quantized_writes=tuple(s for s in spans if s.quantized),
        decodes=tuple(decodes),
        chunks=tuple(s for s in spans if s.row_end - s.row_start > 1))


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    """The int64 arrays end to end (empty if there are none)."""
    return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
