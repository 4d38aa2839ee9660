"""The first call of every attention kernel a serving step can make, before serving.

Numba compiles a kernel on its first call with new argument types, or loads it from its cache;
the paged kernel is built once for float pages and once per 8-bit format. On a new machine the
tiny preset's first float step took 4.6 s and its first INT8 decode 3.5 s (measured on 2
cores). Inside a served step that time would be counted as the step's, and fed to the
calibrator as a machine gone slow; the INT8 one came mid-run, on the first quantize.
"""

from __future__ import annotations

import time

import numpy as np

from refimpl.config._validate import positive_int
from refimpl.kv.storage import QUANTIZE_FACTOR
from refimpl.model.forward import LlamaModel
from refimpl.model.plan import SeqSlice

__all__ = ["FIRST_CALLS", "warm_up_kernels"]

FIRST_CALLS = "first calls: kernels compile or load"  # what a progress bar says meanwhile


def warm_up_kernels(model: LlamaModel, page_size: int, quantized_format: str = "int8"
                    ) -> float:
    """Run a prefill chunk and a decode on float pages and on `quantized_format` pages of
    scratch storage, so their kernels compile or load now; returns the seconds it took."""
    positive_int("page_size", page_size)
    started = time.perf_counter()
    tokens = min(max(page_size + 1, 3), model.config.max_context - 1)  # crosses a page
    pages = -(-(tokens + 1) // page_size)
    storage = model.storage_for(3 * pages, page_size, quantized_format)
    tables = [np.arange(r * pages, (r + 1) * pages, dtype=np.int64) for r in range(3)]
    prompt = np.zeros(tokens, dtype=np.int64)
    # float pages: two whole prompts and a partial one, then a decode
    model.step(storage, [SeqSlice(r, prompt, 0, tables[r], True) for r in (0, 1)]
               + [SeqSlice(2, prompt[:-2], 0, tables[2], False)])
    model.step(storage, [SeqSlice(0, prompt[:1], tokens, tables[0], True)])
    # 8-bit pages (4P tokens each): a decode, and the partial prompt's last two tokens
    for r, length in ((1, tokens), (2, tokens - 2)):
        storage.on_quantize(r, tables[r].tolist(), length)
    kept = -(-(tokens + 1) // (QUANTIZE_FACTOR * page_size))
    model.step(storage, [SeqSlice(1, prompt[:1], tokens, tables[1][:kept], True),
                         SeqSlice(2, prompt[-2:], tokens - 2, tables[2][:kept], True)])
    return time.perf_counter() - started
