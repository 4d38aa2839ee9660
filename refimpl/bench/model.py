"""`refimpl bench model`: the Llama model's engine steps beside Hugging Face and plain NumPy.

`LlamaModel.step` over paged KV is timed at batch 1, 8 and 32 for the `tiny` preset and the
largest one (`mobilellm-350m`): prefill tokens/s (the batch's prompts in one step) and decode
tokens/s (one token of every sequence per step, after the prompts), the best of two runs (one
with --quick) and of their decode steps. Two baselines are timed in the same process on the
same weights:

- Hugging Face `transformers` (PyTorch CPU), served as its users would: the checkpoint that
  `LlamaWeights.save` writes, loaded as float32 `LlamaForCausalLM` in eval mode under
  `torch.inference_mode()`; the batch's prompts in one forward, then one token per sequence per
  forward through the model's own KV cache, logits of the last row only as `generate` asks;
  each run of a batch right after refimpl's, and the best taken alike. Where torch or
  transformers (4.56 or later) is not installed, the report says so and has no HF figures.
- generation without a KV cache: `reference_logits` recomputed over the whole sequence for
  every new token, one sequence at a time (batching does not help it).
"""

from __future__ import annotations

import inspect
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from refimpl.bench._report import publish
from refimpl.bench._timing import threads
from refimpl.model import LlamaConfig, LlamaModel, LlamaWeights, SeqSlice, reference_logits

PRESETS = ("tiny", "mobilellm-350m")
BATCHES = (1, 8, 32)
PAGE_SIZE = 16
# The first transformers whose `from_pretrained` takes `dtype=` (and whose forward takes
# `logits_to_keep`, which `generate` uses so that a prompt's logits are of its last row only).
HF_MIN_VERSION = (4, 56)


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
    return _figures(batch, prompt_tokens, prefill_s, best)


def _figures(batch: int, prompt_tokens: int, prefill_s: float, decode_s: float
             ) -> dict[str, float]:
    """A row of the report from the prefill's seconds and one decode step's."""
    return {"prefill_tokens_s": batch * prompt_tokens / prefill_s,
            "decode_tokens_s": batch / decode_s, "decode_step_ms": decode_s * 1e3}


def _hugging_face() -> tuple[Any, Any] | str:
    """(torch, transformers) when both import and transformers is recent enough, else why not."""
    try:
        import torch
        import transformers
    except ImportError as error:
        return f"not installed ({error.name or error}): not measured"
    from packaging.version import Version  # a dependency of transformers

    if Version(transformers.__version__).release[:2] < HF_MIN_VERSION:
        return (f"transformers {transformers.__version__} is older than "
                f"{'.'.join(map(str, HF_MIN_VERSION))}: not measured")
    return torch, transformers


def _load_hf(torch: Any, transformers: Any, weights: LlamaWeights) -> Any:
    """`weights` as a float32 `LlamaForCausalLM` in eval mode, through a checkpoint saved in a
    temporary folder (removed once loaded)."""
    logging = transformers.utils.logging
    bar = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # its "Loading weights" bar would cut into the table
    try:
        with tempfile.TemporaryDirectory(prefix="refimpl-bench-model-") as folder:
            weights.save(folder)
            hf = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)
    finally:
        if bar:
            logging.enable_progress_bar()
    return hf.eval()


def _time_hf(torch: Any, hf: Any, batch: int, prompt_tokens: int, decode_steps: int,
             rng: np.random.Generator) -> dict[str, float]:
    """Prefill and decode tokens/s of `batch` sequences through transformers' own KV cache
    (the best of the decode steps), one forward per step as `generate` runs them."""
    # transformers 5 renamed `past_key_values` to `cache`, as argument and as output field.
    cache = "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"
    prompts = torch.from_numpy(rng.integers(0, hf.config.vocab_size, (batch, prompt_tokens)))
    with torch.inference_mode():
        start = time.perf_counter()
        out = hf(input_ids=prompts, use_cache=True, logits_to_keep=1)
        prefill_s = time.perf_counter() - start
        best = float("inf")
        for _ in range(decode_steps):
            tokens = out.logits[:, -1].argmax(dim=-1, keepdim=True)  # (batch, 1)
            past = {cache: getattr(out, cache)}
            start = time.perf_counter()
            out = hf(input_ids=tokens, use_cache=True, logits_to_keep=1, **past)
            best = min(best, time.perf_counter() - start)
    return _figures(batch, prompt_tokens, prefill_s, best)


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
    return _figures(1, prompt_tokens, prefill_s, decode_s)


def _ratios(ours: dict[str, float], theirs: dict[str, float]) -> dict[str, float]:
    """refimpl's prefill and decode tokens/s over the baseline's."""
    return {kind: ours[f"{kind}_tokens_s"] / theirs[f"{kind}_tokens_s"]
            for kind in ("prefill", "decode")}


def _fastest(rows: list[dict[str, float]]) -> dict[str, float]:
    """The best prefill and the best decode step of several runs of one shape."""
    return {"prefill_tokens_s": max(r["prefill_tokens_s"] for r in rows),
            "decode_tokens_s": max(r["decode_tokens_s"] for r in rows),
            "decode_step_ms": min(r["decode_step_ms"] for r in rows)}


def _time_threads(model: LlamaModel, hf: tuple[Any, Any] | None, prompt_tokens: int,
                  decode_steps: int, quick: bool) -> dict:
    """Every batch's figures of refimpl (and of Hugging Face, given (torch, its model)), then
    the no-cache baseline's, with the thread count already set."""
    # A run of each side first: a new thread count starts its pools on the first call, and a
    # first prompt of this length would pay for Numba's load and oneDNN's set-up.
    _time_model(model, 1, prompt_tokens, 2, np.random.default_rng(0))
    if hf is not None:
        _time_hf(*hf, 1, prompt_tokens, 2, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    figures: dict = {"step": {}}
    if hf is not None:
        figures |= {"hf": {}, "vs_hf": {}}
    for b in BATCHES:
        ours, theirs = [], []
        # A prefill is timed once a run, so two runs (one with --quick) keep a single slow one
        # on a shared machine from deciding the figure; the two sides alternate, so the
        # machine's load changes between batches more than between them.
        for _ in range(1 if quick else 2):
            ours.append(_time_model(model, b, prompt_tokens, decode_steps, rng))
            if hf is not None:
                theirs.append(_time_hf(*hf, b, prompt_tokens, decode_steps, rng))
        figures["step"][str(b)] = _fastest(ours)
        if hf is not None:
            figures["hf"][str(b)] = _fastest(theirs)
            figures["vs_hf"][str(b)] = _ratios(figures["step"][str(b)], figures["hf"][str(b)])
    figures["no_cache_numpy"] = _time_baseline(model.weights, prompt_tokens,
                                               2 if quick else 3, rng)
    return figures


def run(*, quick: bool = False, num_threads: int | None = None, json_path: Path | None = None,
        presets: Sequence[str | LlamaConfig] = PRESETS) -> dict:
    """Measure, print and optionally write the figures, with 1 and 2 threads unless told;
    `presets` are preset names or shapes of one's own."""
    thread_counts = (1, 2) if num_threads is None else (num_threads,)
    decode_steps = 4 if quick else 8
    libraries = _hugging_face()
    if isinstance(libraries, str):
        baseline = libraries
    else:
        torch, transformers = libraries
        baseline = (f"transformers {transformers.__version__}, torch {torch.__version__}: "
                    "float32 LlamaForCausalLM, KV cache")
    report: dict = {"page_size": PAGE_SIZE, "torch_baseline": baseline, "models": {}}
    for preset in presets:
        config = LlamaConfig.preset(preset) if isinstance(preset, str) else preset
        weights = LlamaWeights.random(config, seed=0)
        model = LlamaModel(weights)
        prompt_tokens = _prompt_tokens(config, quick)
        hf = None if isinstance(libraries, str) else (torch, _load_hf(torch, transformers,
                                                                          weights))
        figures = {"parameters": config.num_parameters(), "prompt_tokens": prompt_tokens,
                   "by_threads": {}}
        for n in thread_counts:
            with threads(n):  # PyTorch's too (torch.set_num_threads), since it is loaded
                figures["by_threads"][str(n)] = _time_threads(model, hf, prompt_tokens,
                                                              decode_steps, quick)
        report["models"][config.name] = figures
    return publish(report, print_report, json_path)


def _cell(value: float | None, spec: str, width: int = 8) -> str:
    """`value` formatted to `width`, or a dash where it was not measured."""
    return f"{'-' if value is None else format(value, spec):>{width}}"


def _row(ours: dict[str, float], hf: dict[str, float], ratio: dict[str, float]) -> str:
    """One batch's prefill, decode and ms/step cells: refimpl, Hugging Face, refimpl/HF."""
    return " ".join([
        _cell(ours["prefill_tokens_s"], ".0f"), _cell(hf.get("prefill_tokens_s"), ".0f"),
        _cell(ratio.get("prefill"), ".2f", 7) + "x",
        _cell(ours["decode_tokens_s"], ".1f"), _cell(hf.get("decode_tokens_s"), ".1f"),
        _cell(ratio.get("decode"), ".2f", 7) + "x",
        _cell(ours["decode_step_ms"], ".1f"), _cell(hf.get("decode_step_ms"), ".1f")])


def print_report(report: dict) -> None:
    """The figures as a text table."""
    print(f"LlamaModel.step over paged KV (pages of {report['page_size']}) vs Hugging Face "
          "(HF) on the same weights\nand plain-NumPy generation without a KV cache; "
          "HF baseline: " + report["torch_baseline"])
    for name, figures in report["models"].items():
        print(f"\n{name}: {figures['parameters'] / 1e6:.1f}M parameters, prompts of "
              f"{figures['prompt_tokens']} tokens")
        print(f"  {'':13} {' prefill tok/s ':-^26} {' decode tok/s ':-^26} {' ms/step ':-^17}")
        print(f"  {'threads':>7} {'batch':>5} " + " ".join(
            f"{label:>8}" for label in ["refimpl", "HF", "vs HF"] * 2 + ["refimpl", "HF"])
            + f" {'vs no-cache':>11}")
        for n, by_batch in figures["by_threads"].items():
            base = by_batch["no_cache_numpy"]
            for batch, row in by_batch["step"].items():
                vs_base = row["decode_tokens_s"] / base["decode_tokens_s"]
                print(f"  {n:>7} {batch:>5} "
                      + _row(row, by_batch.get("hf", {}).get(batch, {}),
                             by_batch.get("vs_hf", {}).get(batch, {}))
                      + f" {vs_base:>10.1f}x")
            print(f"  {n:>7} {'1':>5} {base['prefill_tokens_s']:>8.0f} {'':17} "
                  f"{base['decode_tokens_s']:>8.1f} {'':17} {base['decode_step_ms']:>8.1f}"
                  f" {'':8}  (no-cache NumPy)")
