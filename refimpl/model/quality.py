"""What quantizing a request's KV cache mid-sequence costs the model: K/V error and tokens.

The pool's third rung under memory pressure (`KVStorage.on_quantize`) turns a request's float
pages into 8-bit codes. `kv_quantization_report` runs one request twice, greedy, from the same
prompt: once on float pages, once quantized right after the prompt. It reports the error of
each layer's dequantized K and V at the moment of quantization, relative to the layer's
largest magnitude, and how many of the generated tokens agree with the float run.

Bounds on that error, per element: INT8 rounds to the nearest of 127 steps per page and head,
so |error| <= amax / 254 (0.39% of the page's largest value); FP8 e4m3 keeps 3 mantissa bits,
so |error| <= |x| / 16 (6.25%) for normal values and less for subnormal ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refimpl.kv.storage import QUANTIZE_FACTOR
from refimpl.model.forward import LlamaModel
from refimpl.model.generate import greedy_decode, prefill

__all__ = ["ERROR_BOUNDS", "KVQuantizationReport", "kv_quantization_report"]

# The largest error relative to a layer's largest |K| or |V| that each format can make.
ERROR_BOUNDS = {"int8": 1 / 254, "fp8_e4m3": 1 / 16}


@dataclass(frozen=True)
class KVQuantizationReport:
    """Per-layer K/V error of quantized pages and greedy agreement with float pages."""

    fmt: str
    k_error: np.ndarray  # (L,) max |dequantized - float| / max |float| of each layer's K
    v_error: np.ndarray  # (L,) the same for V
    float_tokens: np.ndarray  # (n,) greedy tokens on float pages
    quantized_tokens: np.ndarray  # (n,) greedy tokens after quantizing at the prompt's end

    @property
    def token_agreement(self) -> float:
        """Fraction of generated positions where the two runs chose the same token."""
        return float(np.mean(self.float_tokens == self.quantized_tokens))

    @property
    def first_divergence(self) -> int | None:
        """The first generated position where the runs differ, or None if they never do."""
        differ = np.flatnonzero(self.float_tokens != self.quantized_tokens)
        return int(differ[0]) if differ.size else None


def kv_quantization_report(model: LlamaModel, prompt: np.ndarray, num_new_tokens: int,
                           fmt: str = "int8", *, page_size: int = 16) -> KVQuantizationReport:
    """Generate `num_new_tokens` after `prompt` with float pages and with pages quantized to
    `fmt` once the prompt is in; compare K/V rows and tokens (see the module docstring)."""
    prompt = np.asarray(prompt, dtype=np.int64)
    length = prompt.size + num_new_tokens
    num_pages = -(-length // page_size)
    table = np.arange(num_pages, dtype=np.int64)
    runs = []
    errors = np.zeros((2, model.config.num_layers))
    for quantize in (False, True):
        storage = model.storage_for(num_pages, page_size, fmt)
        logits = prefill(model, storage, 0, prompt, table)
        if quantize:
            before = [storage.read(0, table.tolist(), prompt.size, layer)
                      for layer in range(model.config.num_layers)]
            storage.on_quantize(0, table.tolist(), prompt.size)
            for layer, rows in enumerate(before):
                after = storage.read(0, table.tolist(), prompt.size, layer)
                for kind in (0, 1):  # K, then V
                    errors[kind, layer] = (np.abs(after[kind] - rows[kind]).max()
                                           / np.abs(rows[kind]).max())
        # A quantized request keeps only the first quarter of its pages (4P tokens each).
        pages = table[: -(-length // (QUANTIZE_FACTOR * page_size))] if quantize else table
        runs.append(greedy_decode(model, storage, 0, logits, prompt.size, num_new_tokens, pages))
    return KVQuantizationReport(fmt, errors[0], errors[1], runs[0], runs[1])
