"""The K and V arrays behind a page pool, in the layout the attention kernels read.

A page id owns the same slot in every layer (the seed's "a page holds all layers"), stored
layer-major so that one layer's cache is a contiguous `(num_pages, P, Hkv, d)` float32 array,
exactly what `refimpl.kernels.decode_attention` and `chunk_attention` take.

Quantized requests keep their page ids: a float32 page's bytes are reinterpreted as 8-bit codes
of `4 * P` tokens (`refimpl.kernels.QuantizedPages`, with a scale per (page, KV head)), so
quantizing frees three quarters of the request's pages and the kernels read the codes in place.
The pool calls the `on_*` hooks; the engine calls `write` and `read` and asks for kernel views.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from refimpl.errors import KVCacheError
from refimpl.kernels.quant import QuantizedPages, dequantize_pages, quantize_pages
from refimpl.kv._checks import check_count

__all__ = ["QUANTIZE_FACTOR", "KVStorage"]

QUANTIZE_FACTOR = 4  # float32 -> 8-bit codes: a page holds four times the tokens


@dataclass
class _Spilled:
    """A request's K/V kept in the CPU tier, as float32 rows (L, n, Hkv, d)."""

    k: np.ndarray
    v: np.ndarray


@dataclass
class KVStorage:
    """float32 K/V pages for every layer, plus scales for pages holding 8-bit codes."""

    num_layers: int
    num_pages: int
    page_size: int
    num_kv_heads: int
    head_dim: int
    quantized_format: str = "int8"  # the format `quantize` writes: "int8" or "fp8_e4m3"
    k: np.ndarray = field(init=False)  # (L, num_pages, P, Hkv, d) float32
    v: np.ndarray = field(init=False)
    k_scales: np.ndarray = field(init=False)  # (L, num_pages, Hkv) float32
    v_scales: np.ndarray = field(init=False)
    _formats: dict[int, str] = field(init=False, default_factory=dict)  # quantized requests
    _spilled: dict[int, _Spilled] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_pages", "page_size", "num_kv_heads", "head_dim"):
            check_count(name, getattr(self, name), 1)
        if self.quantized_format not in ("int8", "fp8_e4m3"):
            raise KVCacheError("quantized_format", self.quantized_format, "unknown format",
                               choices=("int8", "fp8_e4m3"))
        shape = (self.num_layers, self.num_pages, self.page_size, self.num_kv_heads,
                 self.head_dim)
        self.k = np.zeros(shape, dtype=np.float32)
        self.v = np.zeros(shape, dtype=np.float32)
        self.k_scales = np.ones((*shape[:2], self.num_kv_heads), dtype=np.float32)
        self.v_scales = np.ones_like(self.k_scales)

    # ---- views for the kernels -------------------------------------------------------------
    def float_cache(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer `layer`'s float32 K and V caches, (num_pages, P, Hkv, d) views."""
        return self.k[layer], self.v[layer]

    def quantized_cache(self, layer: int) -> tuple[QuantizedPages, QuantizedPages]:
        """Layer `layer`'s pages read as 8-bit codes of 4P tokens each, for quantized requests."""
        return (self._codes_view(self.k, self.k_scales, layer),
                self._codes_view(self.v, self.v_scales, layer))

    def _codes_view(self, data: np.ndarray, scales: np.ndarray, layer: int) -> QuantizedPages:
        code_dtype = np.int8 if self.quantized_format == "int8" else np.uint8
        codes = data[layer].view(code_dtype).reshape(
            self.num_pages, QUANTIZE_FACTOR * self.page_size, self.num_kv_heads, self.head_dim
        )  # (num_pages, 4P, Hkv, d): the same bytes, four codes per float
        return QuantizedPages(codes, scales[layer], self.quantized_format)

    def is_quantized(self, request_id: int) -> bool:
        """Whether the request's pages hold 8-bit codes."""
        return request_id in self._formats

    # ---- token rows ------------------------------------------------------------------------
    def read(self, request_id: int, table: list[int], length: int, layer: int
             ) -> tuple[np.ndarray, np.ndarray]:
        """The request's first `length` K and V rows of `layer`, float32 (length, Hkv, d)."""
        if request_id in self._formats:
            k, v = self.quantized_cache(layer)
            rows = [dequantize_pages(_pages(c, table)) for c in (k, v)]
        else:
            rows = [data[layer][table] for data in (self.k, self.v)]
        k_rows, v_rows = (r.reshape(-1, self.num_kv_heads, self.head_dim)[:length] for r in rows)
        return k_rows, v_rows

    def write(self, request_id: int, table: list[int], length: int, layer: int, start: int,
              k_rows: np.ndarray, v_rows: np.ndarray) -> None:
        """Store rows (n, Hkv, d) at positions [start, start + n) of a request of `length`."""
        count = k_rows.shape[0]
        if start < 0 or start + count > length:
            raise KVCacheError("start", start, f"rows {start}..{start + count} fall outside the "
                               f"request's {length} tokens (append first)")
        if request_id in self._formats:
            self._write_quantized(request_id, table, length, layer, start, k_rows, v_rows)
            return
        pages = np.asarray(table, dtype=np.int64)
        positions = np.arange(start, start + count)
        page_of = pages[positions // self.page_size]
        offset = positions % self.page_size
        self.k[layer, page_of, offset] = k_rows
        self.v[layer, page_of, offset] = v_rows

    def write_slots(self, layer: int, pages: np.ndarray, offsets: np.ndarray,
                    k_rows: np.ndarray, v_rows: np.ndarray) -> None:
        """Store rows (n, Hkv, d) of float requests at slots (pages[i], offsets[i]) of `layer`:
        a whole engine step's rows in one scatter instead of a `write` per request."""
        self.k[layer, pages, offsets] = k_rows
        self.v[layer, pages, offsets] = v_rows

    def _write_quantized(self, request_id, table, length, layer, start, k_rows, v_rows) -> None:
        # An 8-bit page shares one scale per head, so a write re-quantizes each touched page.
        k_all, v_all = self.read(request_id, table, length, layer)
        k_all[start : start + k_rows.shape[0]] = k_rows
        v_all[start : start + v_rows.shape[0]] = v_rows
        tokens_per_page = QUANTIZE_FACTOR * self.page_size
        first, last = start // tokens_per_page, (start + k_rows.shape[0] - 1) // tokens_per_page
        self._store_codes(table[first : last + 1], layer, k_all, v_all, first * tokens_per_page)

    def _store_codes(self, pages: list[int], layer: int, k_rows: np.ndarray, v_rows: np.ndarray,
                     offset: int) -> None:
        """Quantize rows [offset, offset + len(pages) * 4P) into `pages` of `layer`."""
        tokens_per_page = QUANTIZE_FACTOR * self.page_size
        span = len(pages) * tokens_per_page
        for data, scales, rows in ((self.k, self.k_scales, k_rows),
                                   (self.v, self.v_scales, v_rows)):
            block = np.zeros((span, self.num_kv_heads, self.head_dim), dtype=np.float32)
            chunk = rows[offset : offset + span]
            block[: chunk.shape[0]] = chunk
            quantized = quantize_pages(block.reshape(len(pages), tokens_per_page,
                                                     self.num_kv_heads, self.head_dim),
                                       self.quantized_format)
            view = self._codes_view(data, scales, layer)
            view.codes[pages] = quantized.codes
            scales[layer, pages] = quantized.scales

    # ---- hooks the pool calls --------------------------------------------------------------
    def on_copy(self, pairs: np.ndarray) -> None:
        """Copy-on-write: duplicate page `src` into `dst` for every `(src, dst)` pair."""
        if len(pairs):
            src, dst = pairs[:, 0], pairs[:, 1]
            for data in (self.k, self.v):
                data[:, dst] = data[:, src]
            for scales in (self.k_scales, self.v_scales):
                scales[:, dst] = scales[:, src]

    def on_quantize(self, request_id: int, table: list[int], length: int) -> None:
        """Repack the request's float rows as 8-bit codes into the first pages of `table`."""
        keep = table[: -(-length // (QUANTIZE_FACTOR * self.page_size))]
        for layer in range(self.num_layers):
            k_rows, v_rows = self.read(request_id, table, length, layer)
            self._store_codes(keep, layer, k_rows.copy(), v_rows.copy(), 0)
        self._formats[request_id] = self.quantized_format

    def on_spill(self, request_id: int, table: list[int], length: int) -> None:
        """Copy the request's rows, all layers, to the CPU tier."""
        rows = [self.read(request_id, table, length, layer) for layer in range(self.num_layers)]
        self._spilled[request_id] = _Spilled(np.stack([r[0] for r in rows]),
                                             np.stack([r[1] for r in rows]))

    def on_restore(self, request_id: int, table: list[int], length: int) -> None:
        """Write the spilled rows back into the request's new pages."""
        spilled = self._spilled.pop(request_id)
        quantized = self._formats.pop(request_id, None)
        for layer in range(self.num_layers):
            if quantized is not None:
                self._store_codes(table, layer, spilled.k[layer], spilled.v[layer], 0)
            else:
                self.write(request_id, table, length, layer, 0, spilled.k[layer],
                           spilled.v[layer])
        if quantized is not None:
            self._formats[request_id] = quantized

    def on_free(self, request_id: int) -> None:
        """Forget a finished request's format and any CPU-tier copy."""
        self._formats.pop(request_id, None)
        self._spilled.pop(request_id, None)

    def on_fork(self, src_id: int, dst_id: int) -> None:
        """A fork reads its pages in the same format as its source."""
        if src_id in self._formats:
            self._formats[dst_id] = self._formats[src_id]


def _pages(cache: QuantizedPages, table: list[int]) -> QuantizedPages:
    """The pages `table` of a quantized cache, as their own QuantizedPages."""
    return QuantizedPages(cache.codes[table], cache.scales[table], cache.fmt)
