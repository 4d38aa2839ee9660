"""`refimpl bench model`: the Llama model's engine steps beside plain-NumPy generation.

`LlamaModel.step` over paged KV is timed at batch 1, 8 and 32 for the `tiny` preset and the
largest one (`mobilellm-350m`): prefill tokens/s (the batch's prompts in one step) and decode
tokens/s (one token of every sequence per step, after the prompts). The baseline, timed in the
same process, is generation without a KV cache: `reference_logits` recomputed over the whole
sequence for every new token, one sequence at a time (batching does not help it). PyTorch is
not installed where refimpl is developed, so there is no PyTorch baseline.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from refimpl.bench._report import publish
from refimpl.bench._timing import threads
from refimpl.model import LlamaConfig, LlamaModel, LlamaWeights, SeqSlice, reference_logits

PRESETS = ("tiny", "mobilellm-350m")
BATCHES = (1, 8, 32)
PAGE_SIZE = 16


def _prompt_tokens(config: LlamaConfig, quick: bool) -> int:
    """Prompt length: long enough for attention to count, short enough for two cores."""
    large = config.num_parameters() > 100e6
    return (16 if quick else 64) if large else (64 if quick else 256)


def _time_model(model: LlamaModel, batch: int, prompt_tokens: int, decode_steps: int,
                rng: np.random.Generator) -> dict[str, float]:
    """Prefill and decode tokens/s of `batch` sequences (the best of the decode steps)."""
    c = model.config
    pages_each = -(-(prompt_tokens + decode_steps) // PAGE_SIZE)
    storage = model.storage_for(batch * pages_each, PAGE_SIZE)
    tables = [np.arange(b * pages_each, (b + 1) * pages_each) for b in range(batch)]
    prompts = rng.integers(0, c.vocab_size, (batch, prompt_tokens))
    seqs = [SeqSlice(b, prompts[b], 0, tables[b], True) for b in range(batch)]
    start = time.perf_counter()
    logits = model.step(storage, seqs)
    prefill_s = time.perf_counter() - start
    best = float("inf")
    for i in range(decode_steps):
        tokens = np.argmax(logits, axis=1)
        seqs = [SeqSlice(b, tokens[b : b + 1], prompt_tokens + i, tables[b], True)
                for b in range(batch)]
        start = time.perf_counter()
        logits = model.step(storage, seqs)
        best = min(best, time.perf_counter() - start)
    return {"prefill_tokens_s": batch * prompt_tokens / prefill_s,
            "decode_tokens_s": batch / best, "decode_step_ms": best * 1e3}


def _time_baseline(weights: LlamaWeights, prompt_tokens: int, new_tokens: int,
                   rng: np.random.Generator) -> dict[str, float]:
    """Tokens/s of no-cache generation: the prompt's forward, then a whole forward per token."""
    sequence = rng.integers(0, weights.config.vocab_size, prompt_tokens)
    start = time.perf_counter()
    logits = reference_logits(weights, sequence)
    prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(new_tokens):
        sequence = np.append(sequence, np.argmax(logits[-1]))
        logits = reference_logits(weights, sequence)
    decode_s = (time.perf_counter() - start) / new_tokens
    return {"prefill_tokens_s": prompt_tokens / prefill_s, "decode_tokens_s": 1 / decode_s,
            "decode_step_ms": decode_s * 1e3}


def run(*, quick: bool = False, num_threads: int | None = None, json_path: Path | None = None,
        presets: Sequence[str | LlamaConfig] = PRESETS) -> dict:
    """Measure, print and optionally write the figures, with 1 and 2 threads unless told;
    `presets` are preset names or shapes of one's own."""
    thread_counts = (1, 2) if num_threads is None else (num_threads,)
    decode_steps = 4 if quick else 8
    report: dict = {"page_size": PAGE_SIZE, "torch_baseline": "not installed: not measured",
                    "models": {}}
    for preset in presets:
        config = LlamaConfig.preset(preset) if isinstance(preset, str) else preset
        weights = LlamaWeights.random(config, seed=0)
        model = LlamaModel(weights)
        prompt_tokens = _prompt_tokens(config, quick)
        _time_model(model, 1, 8, 2, np.random.default_rng(0))  # compile/load the kernels
        figures = {"parameters": config.num_parameters(), "prompt_tokens": prompt_tokens,
                   "by_threads": {}}
        for n in thread_counts:
            with threads(n):
                rng = np.random.default_rng(1)
                figures["by_threads"][str(n)] = {
                    "step": {str(b): _time_model(model, b, prompt_tokens, decode_steps, rng)
                             for b in BATCHES},
                    "no_cache_numpy": _time_baseline(weights, prompt_tokens, 2 if quick else 3,
                                                     rng)}
        report["models"][config.name] = figures
    return publish(report, print_report, json_path)


def print_report(report: dict) -> None:
    """The figures as a text table."""
    print(f"LlamaModel.step over paged KV (pages of {report['page_size']}) vs plain-NumPy "
          "generation without a KV cache; PyTorch: " + report["torch_baseline"])
    for name, figures in report["models"].items():
        print(f"\n{name}: {figures['parameters'] / 1e6:.1f}M parameters, prompts of "
              f"{figures['prompt_tokens']} tokens")
        print(f"  {'threads':>7} {'batch':>5} {'prefill tok/s':>14} {'decode tok/s':>13} "
              f"{'ms/step':>8} {'vs no-cache':>12}")
        for n, by_batch in figures["by_threads"].items():
            base = by_batch["no_cache_numpy"]
            for batch, row in by_batch["step"].items():
                ratio = row["decode_tokens_s"] / base["decode_tokens_s"]
                print(f"  {n:>7} {batch:>5} {row['prefill_tokens_s']:>14.0f} "
                      f"{row['decode_tokens_s']:>13.1f} {row['decode_step_ms']:>8.1f} "
                      f"{ratio:>11.1f}x")
            print(f"  {n:>7} {'1':>5} {base['prefill_tokens_s']:>14.0f} "
                  f"{base['decode_tokens_s']:>13.1f} {base['decode_step_ms']:>8.1f}   "
                  "(no-cache NumPy)")
