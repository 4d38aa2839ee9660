"""`refimpl bench kernels`: attention kernel speed beside baselines timed in the same run.

Prefill GFLOP/s beside PyTorch's `scaled_dot_product_attention` (if installed; timed in a
process of its own), the NumPy oracle and a float32 GEMM (`numpy.matmul` at 2048, this
machine's practical peak), with the fastest tile of the SRAM budget for short and for long
prompts; decode KV bytes per second beside a STREAM-style read of the same bytes, front to
back and page by page in the kernel's order; INT8 and FP8 pages against float32; and each
tile candidate's analytic HBM bytes beside its measured time.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

import numba
import numpy as np
from numba import prange

from refimpl._numba import kernel_pair
from refimpl.bench._report import publish
from refimpl.bench._timing import best_seconds, threads
from refimpl.errors import CapacityError
from refimpl.kernels import (
    PagedTiles,
    PrefillTiles,
    decode_attention,
    decode_costs,
    default_sram_budget,
    prefill_attention,
    prefill_costs,
    quantize_pages,
    reference_attention,
)

__all__ = ["run"]

PREFILL = {"batch": 1, "num_q_heads": 32, "num_kv_heads": 8, "head_dim": 128}
DECODE = {"batch": 32, "num_q_heads": 32, "num_kv_heads": 8, "head_dim": 128, "page_size": 16}
# Prefill tiles the run times at each of TUNE_SEQ_LENS, keeping the fastest that fits the SRAM
# budget; a T takes the pick of the longest tuning length at or below it (the shortest below
# that). Which one wins depends on the machine's L2 (32 x 128 x 4 heads, 386 KiB, on a 512 KiB
# L2; 64 x 128 x 4, 643 KiB, on a 1 MiB one at T=1024) and on T: at T=16384 on a 1 MiB L2 the
# 256-key tile 64 x 256 x 4 (899 KiB) ran 1.03-1.11x 64 x 128 x 4 (1 thread, alternated calls).
PREFILL_CHOICES = (PrefillTiles(32, 128, 4), PrefillTiles(64, 128, 4), PrefillTiles(64, 64, 4),
                   PrefillTiles(128, 128, 2), PrefillTiles(64, 256, 2), PrefillTiles(32, 64, 4),
                   PrefillTiles(64, 256, 4))
TUNE_SEQ_LENS = (1024, 4096)
LONG_SEQ_LEN = 8192  # from here one timed call a point: a call takes seconds
LONG_ROUNDS = 2  # alternated rounds of ours and torch at those lengths
DECODE_TILES = PagedTiles(tile_q=1, pages_per_tile=2, heads_per_tile=4, kv_heads_per_tile=8)
# Rounds of every decode measure in turn, each keeping its fastest: on a busy host the same
# decode spread up to 40% between rounds, enough to put FP8 below float32 in one of them.
DECODE_ROUNDS = 3


def alternated_best(timers: dict, rounds: int) -> dict:
    """Each timer's fewest seconds over `rounds` rounds that run all the timers in turn (a
    timer: no arguments, returns seconds)."""
    best = dict.fromkeys(timers, np.inf)
    for _ in range(rounds):
        for name, timer in timers.items():
            best[name] = min(best[name], timer())
    return best


@kernel_pair
def _read_words(words, num_blocks):
    """Sum of int64 words: a STREAM-style read (integer sums vectorize, float sums do not)."""
    total = 0
    size = words.shape[0]
    for block in prange(num_blocks):
        part = words[block * size // num_blocks: (block + 1) * size // num_blocks]
        acc = 0
        for i in range(part.shape[0]):
            acc += part[i]
        total += acc
    return total


@kernel_pair
def _read_pages(k_words, v_words, tables, num_workers):
    """Sum of the int64 words of every sequence's K and V pages, page by page in its table's
    order: the decode kernel's reads, and nothing else (k_words, v_words: (num_pages, words))."""
    total = 0
    batch = tables.shape[0]
    for worker in prange(num_workers):
        acc = 0
        for b in range(worker * batch // num_workers, (worker + 1) * batch // num_workers):
            for p in range(tables.shape[1]):
                for words in (k_words, v_words):
                    page = words[tables[b, p]]
                    for i in range(page.shape[0]):
                        acc += page[i]
        total += acc
    return total


def _read_all(read, arrays) -> None:
    for words in arrays:
        read(words, 64)  # 64 blocks: even shares for the threads


def _causal_flops(seq_len: int) -> float:
    """Useful FLOPs of causal prefill (QK^T and PV on the T(T+1)/2 unmasked pairs)."""
    p = PREFILL
    return 4.0 * p["batch"] * p["num_q_heads"] * p["head_dim"] * seq_len * (seq_len + 1) / 2


def _gemm_gflops(repeats: int) -> float:
    a = np.ones((2048, 2048), np.float32)
    b = np.ones((2048, 2048), np.float32)
    return 2 * 2048**3 / best_seconds(lambda: np.matmul(a, b), repeats) / 1e9


# PyTorch's SDPA timed in a process of its own: its OpenMP threads and Numba's in one process
# contend, which on 2 threads left torch below its own 1-thread rate (49-54 GFLOP/s at long T).
_SDPA_SECONDS = """
import sys
import torch
from refimpl._timing import best_seconds
batch, q_heads, kv_heads, seq_len, head_dim, num_threads, repeats = map(int, sys.argv[1:])
torch.set_num_threads(num_threads)
torch.manual_seed(0)
q = torch.randn(batch, q_heads, seq_len, head_dim)
k, v = (torch.randn(batch, kv_heads, seq_len, head_dim) for _ in range(2))
sdpa = torch.nn.functional.scaled_dot_product_attention
with torch.inference_mode():
    print(best_seconds(lambda: sdpa(q, k, v, is_causal=True, enable_gqa=True), repeats))
"""


def _torch_installed() -> bool:
    """Whether PyTorch can be imported (found without importing it: that takes seconds)."""
    return importlib.util.find_spec("torch") is not None


def _torch_sdpa(seq_len: int, num_threads: int, repeats: int) -> float | None:
    """Seconds of PyTorch's CPU SDPA on the benchmark's prefill shape at `seq_len`, or None
    without PyTorch."""
    if not _torch_installed():
        return None
    p = PREFILL
    shape = (p["batch"], p["num_q_heads"], p["num_kv_heads"], seq_len, p["head_dim"])
    args = [str(x) for x in (*shape, num_threads, repeats)]
    return float(subprocess.run([sys.executable, "-c", _SDPA_SECONDS, *args], check=True,
                                capture_output=True, text=True).stdout)


def _oracle_seconds(q, k, v) -> float:
    """The NumPy oracle, one query head at a time (the full float64 score matrix would not fit)."""
    group = q.shape[1] // k.shape[1]

    def all_heads() -> None:
        for h in range(q.shape[1]):
            g = h // group
            reference_attention(q[:, h:h + 1], k[:, g:g + 1], v[:, g:g + 1])

    return best_seconds(all_heads, repeats=1)


def _prefill_inputs(seq_len: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p = PREFILL
    q = rng.standard_normal((p["batch"], p["num_q_heads"], seq_len, p["head_dim"]),
                            dtype=np.float32)
    k, v = (rng.standard_normal((p["batch"], p["num_kv_heads"], seq_len, p["head_dim"]),
                                dtype=np.float32) for _ in range(2))
    return q, k, v


def _prefill_call(tiles: PrefillTiles, q, k, v, parallel: bool):
    return partial(prefill_attention, q, k, v, tile_q=tiles.tile_q, tile_k=tiles.tile_k,
                   heads_per_tile=tiles.heads_per_tile, parallel=parallel,
                   check_inputs_finite=False)


def pick_prefill_tiles(repeats: int, rng, budget_bytes: int | None = None,
                       seq_len: int = TUNE_SEQ_LENS[0]) -> PrefillTiles:
    """The fastest of `PREFILL_CHOICES` within the SRAM budget (default: this machine's), timed
    on one thread at `seq_len`."""
    budget = default_sram_budget() if budget_bytes is None else budget_bytes
    fitting = [t for t in PREFILL_CHOICES if t.sram_bytes(PREFILL["head_dim"]) <= budget]
    if not fitting:
        raise CapacityError("sram_budget_bytes", budget, "no prefill tile of the benchmark fits")
    q, k, v = _prefill_inputs(seq_len, rng)
    with threads(1):
        seconds = [best_seconds(_prefill_call(t, q, k, v, False), repeats) for t in fitting]
    return fitting[int(np.argmin(seconds))]


def _short(tiles: PrefillTiles) -> str:
    return f"{tiles.tile_q}x{tiles.tile_k}x{tiles.heads_per_tile}"


def tiles_for(seq_len: int, picks: dict[int, PrefillTiles]) -> PrefillTiles:
    """The pick of the longest tuning length at or below `seq_len` (the shortest one's below)."""
    tuned = [n for n in sorted(picks) if n <= seq_len]
    return picks[tuned[-1] if tuned else min(picks)]


def bench_prefill(seq_lens, thread_counts, repeats, rng,
                  picks: dict[int, PrefillTiles]) -> list[dict]:
    """Prefill GFLOP/s of ours, PyTorch SDPA, the oracle and the GEMM peak, per T and threads;
    each T runs with `tiles_for(T, picks)`."""
    rows = []
    for seq_len in seq_lens:
        q, k, v = _prefill_inputs(seq_len, rng)
        flops = _causal_flops(seq_len)
        long = seq_len >= LONG_SEQ_LEN
        calls = 1 if long else repeats
        tiles = tiles_for(seq_len, picks)
        for n in thread_counts:
            with threads(n):
                # Long prompts: ours and torch alternated, the faster of two rounds each, so a
                # slow spell of the machine does not decide the ratio (one call a side gave
                # 0.89x at T=8192 on two threads, three alternated rounds 1.00-1.09x).
                timers = {"ours": partial(best_seconds, _prefill_call(tiles, q, k, v, n > 1),
                                          calls)}
                if _torch_installed():
                    timers["torch"] = partial(_torch_sdpa, seq_len, n, calls)
                seconds = alternated_best(timers, LONG_ROUNDS if long else 1)
                ours, torch_s = seconds["ours"], seconds.get("torch")
                oracle = _oracle_seconds(q, k, v) if seq_len <= 2048 else None
                gemm = _gemm_gflops(repeats)
            rows.append({
                "seq_len": seq_len, "threads": n, "tiles": _short(tiles),
                "ours_gflops": flops / ours / 1e9,
                "torch_gflops": None if torch_s is None else flops / torch_s / 1e9,
                "oracle_gflops": None if oracle is None else flops / oracle / 1e9,
                "gemm_peak_gflops": gemm, "ours_s": ours,
            })
    return rows


def _paged_caches(context_len: int, rng):
    """Float32 K/V caches holding B sequences of `context_len` tokens in shuffled pages."""
    d = DECODE
    pages_per_seq = context_len // d["page_size"]
    num_pages = d["batch"] * pages_per_seq
    shape = (num_pages, d["page_size"], d["num_kv_heads"], d["head_dim"])
    k_cache = rng.standard_normal(shape, dtype=np.float32)
    v_cache = rng.standard_normal(shape, dtype=np.float32)
    tables = rng.permutation(num_pages).reshape(d["batch"], pages_per_seq).astype(np.int32)
    q = rng.standard_normal((d["batch"], d["num_q_heads"], d["head_dim"]), dtype=np.float32)
    return q, k_cache, v_cache, tables, np.full(d["batch"], context_len, np.int32)


def bench_decode(context_lens, thread_counts, repeats, rng) -> list[dict]:
    """Decode KV bytes/s beside a read of the same bytes; INT8 and FP8 tokens/s over float32."""
    rows = []
    for context_len in context_lens:
        q, k_cache, v_cache, tables, lens = _paged_caches(context_len, rng)
        words = [x.reshape(-1).view(np.int64) for x in (k_cache, v_cache)]
        page_words = [x.reshape(x.shape[0], -1).view(np.int64) for x in (k_cache, v_cache)]
        kv_bytes = sum(x.nbytes for x in (k_cache, v_cache))
        quantized = {fmt: (quantize_pages(k_cache, fmt), quantize_pages(v_cache, fmt))
                     for fmt in ("int8", "fp8_e4m3")}
        caches = [("float32", (k_cache, v_cache)), *quantized.items()]
        for n in thread_counts:
            read = _read_words.parallel if n > 1 else _read_words.serial
            read_pages = _read_pages.parallel if n > 1 else _read_pages.serial
            calls = {"stream": partial(_read_all, read, words),
                     "paged": partial(read_pages, *page_words, tables, n)}
            calls.update({fmt: partial(
                decode_attention, q, kc, vc, tables, lens,
                pages_per_tile=DECODE_TILES.pages_per_tile,
                heads_per_tile=DECODE_TILES.heads_per_tile,
                kv_heads_per_tile=DECODE_TILES.kv_heads_per_tile, parallel=n > 1,
                check_inputs_finite=False) for fmt, (kc, vc) in caches})
            with threads(n):
                seconds = alternated_best({name: partial(best_seconds, call, repeats)
                                           for name, call in calls.items()}, DECODE_ROUNDS)
            stream, paged = seconds["stream"], seconds["paged"]
            tokens = DECODE["batch"] * context_len  # context tokens read per step
            rows.append({
                "context_len": context_len, "threads": n,
                "kv_bytes_s": kv_bytes / seconds["float32"], "stream_bytes_s": kv_bytes / stream,
                "fraction_of_stream": stream / seconds["float32"],
                "paged_read_bytes_s": kv_bytes / paged,
                "fraction_of_paged_read": paged / seconds["float32"],
                **{f"{fmt}_tokens_s": tokens / seconds[fmt] for fmt, _ in caches},
                "int8_over_float32": seconds["float32"] / seconds["int8"],
                "fp8_over_float32": seconds["float32"] / seconds["fp8_e4m3"],
            })
    return rows


def bench_tiles(seq_len, context_len, repeats, rng) -> list[dict]:
    """Each tile candidate's analytic costs beside its measured time (one thread)."""
    p = PREFILL
    q = rng.standard_normal((1, p["num_q_heads"], seq_len, p["head_dim"]), dtype=np.float32)
    k, v = (rng.standard_normal((1, p["num_kv_heads"], seq_len, p["head_dim"]), dtype=np.float32)
            for _ in range(2))
    rows = []
    with threads(1):
        for tile_q, tile_k, heads in [(16, 64, 4), (32, 64, 4), (64, 64, 2), (32, 128, 4),
                                      (64, 128, 2), (128, 128, 1), (128, 32, 2), (256, 32, 1)]:
            tiles = PrefillTiles(tile_q, tile_k, heads)
            costs = prefill_costs(tiles, batch=1, seq_len=seq_len, **{
                key: p[key] for key in ("num_q_heads", "num_kv_heads", "head_dim")})
            s = best_seconds(partial(
                prefill_attention, q, k, v, tile_q=tile_q, tile_k=tile_k, heads_per_tile=heads,
                parallel=False, check_inputs_finite=False), repeats)
            rows.append({"kernel": "prefill", "tiles": str(tiles), "seq_len": seq_len,
                         "sram_bytes": costs.sram_bytes, "hbm_bytes": costs.hbm_bytes,
                         "arithmetic_intensity": costs.arithmetic_intensity, "seconds": s})
        d = DECODE
        q, k_cache, v_cache, tables, lens = _paged_caches(context_len, rng)
        for pages, heads, kv_heads in [(1, 4, 1), (4, 1, 1), (4, 4, 1), (16, 4, 1), (1, 4, 8),
                                       (2, 4, 8), (2, 4, 4), (4, 4, 4)]:
            tiles = PagedTiles(1, pages, heads, kv_heads)
            costs = decode_costs(tiles, context_lens=lens.tolist(), **{
                key: d[key] for key in ("num_q_heads", "num_kv_heads", "head_dim", "page_size")})
            s = best_seconds(partial(
                decode_attention, q, k_cache, v_cache, tables, lens, pages_per_tile=pages,
                heads_per_tile=heads, kv_heads_per_tile=kv_heads, parallel=False,
                check_inputs_finite=False), repeats)
            rows.append({"kernel": "decode", "tiles": str(tiles), "context_len": context_len,
                         "sram_bytes": costs.sram_bytes, "hbm_bytes": costs.hbm_bytes,
                         "arithmetic_intensity": costs.arithmetic_intensity, "seconds": s})
    return rows


_FIRST_CALLS = """
import time, numpy as np
start = time.perf_counter()
from refimpl.kernels import decode_attention, prefill_attention
x = np.ones((1, 2, 16, 64), np.float32)
prefill_attention(x, x, x, tile_q=8, tile_k=8, parallel=False)
cache = np.ones((2, 16, 2, 64), np.float32)
decode_attention(x[:, :, 0], cache, cache, np.array([[0, 1]]), np.array([20]), parallel=False)
print(time.perf_counter() - start)
"""


def bench_compile() -> dict:
    """Seconds to the first result of prefill and decode in fresh processes: cold, then cached."""
    with tempfile.TemporaryDirectory() as cache_dir:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir, "REFIMPL_NUMBA_CACHE": "1"}
        cold, cached = (float(subprocess.run([sys.executable, "-c", _FIRST_CALLS], env=env,
                                             check=True, capture_output=True, text=True).stdout)
                        for _ in range(2))
    return {"cold_s": cold, "cached_s": cached}


def _fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def print_report(report: dict) -> None:
    """The figures as text tables."""
    c = report["compile"]
    print(f"first call in a fresh process: {c['cold_s']:.1f} s compiling prefill + decode "
          f"with an empty cache, {c['cached_s']:.2f} s loading them from the cache")
    print("\nprefill, causal, B=1 Hq=32 Hkv=8 d=128 (GFLOP/s of useful causal FLOPs; tiles "
          "q x k x heads, the fastest within the SRAM budget timed at T = "
          f"{', '.join(f'{n}: {t}' for n, t in report['prefill_tiles'].items())}; "
          "torch in a process of its own)")
    print(f"  {'T':>5} {'thr':>3} {'tiles':>9} {'ours':>7} {'torch':>7} {'oracle':>7} {'GEMM':>7}"
          f" {'ours/torch':>10} {'ours/GEMM':>9}")
    for r in report["prefill"]:
        vs_torch = None if r["torch_gflops"] is None else r["ours_gflops"] / r["torch_gflops"]
        print(f"  {r['seq_len']:>5} {r['threads']:>3} {r['tiles']:>9} {r['ours_gflops']:>7.1f}"
              f" {_fmt(r['torch_gflops']):>7} {_fmt(r['oracle_gflops']):>7}"
              f" {r['gemm_peak_gflops']:>7.1f} {_fmt(vs_torch, '.2f'):>10}"
              f" {r['ours_gflops'] / r['gemm_peak_gflops']:>9.2f}")
    if not report["torch_installed"]:
        print("  torch: skipped: torch not installed")
    print("\ndecode, B=32 Hq=32 Hkv=8 d=128, pages of 16 shuffled, tiles "
          f"{report['decode_tiles']}")
    print("  (read: one pass over the K/V arrays front to back; paged read: the same bytes "
          "page by page in the tables' order, all the kernel reads)")
    print(f"  {'ctx':>6} {'thr':>3} {'KV GB/s':>8} {'read GB/s':>9} {'% read':>6}"
          f" {'paged GB/s':>10} {'% paged':>7} {'f32 Mtok/s':>10} {'int8/f32':>8}"
          f" {'fp8/f32':>7}")
    for r in report["decode"]:
        print(f"  {r['context_len']:>6} {r['threads']:>3} {r['kv_bytes_s'] / 1e9:>8.2f}"
              f" {r['stream_bytes_s'] / 1e9:>9.2f} {100 * r['fraction_of_stream']:>6.0f}"
              f" {r['paged_read_bytes_s'] / 1e9:>10.2f}"
              f" {100 * r['fraction_of_paged_read']:>7.0f}"
              f" {r['float32_tokens_s'] / 1e6:>10.1f} {r['int8_over_float32']:>8.2f}"
              f" {r['fp8_over_float32']:>7.2f}")
    print("\ntile candidates (1 thread): analytic costs beside measured time")
    print(f"  {'kernel':<8}{'tiles':<80}{'SRAM KiB':>9}{'HBM MiB':>9}{'FLOP/B':>8}{'ms':>9}")
    for r in report["tiles"]:
        print(f"  {r['kernel']:<8}{r['tiles']:<80}{r['sram_bytes'] / 1024:>9.1f}"
              f"{r['hbm_bytes'] / 2**20:>9.1f}{r['arithmetic_intensity']:>8.1f}"
              f"{1e3 * r['seconds']:>9.2f}")


def run(*, quick: bool = False, num_threads: int | None = None,
        json_path: Path | None = None) -> dict:
    """Run the suite, print it, write JSON to `json_path` if given, and return the figures."""
    rng = np.random.default_rng(0)
    if num_threads is None:
        thread_counts = sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)})
    else:
        thread_counts = [num_threads]
    repeats = 3  # best of 3: this class of shared machine varies 1.5-2x from run to run
    compile_s = bench_compile()
    prefill_lens = [512, 1024] if quick else [512, 2048, 4096, 8192, 16384]
    picks = {n: pick_prefill_tiles(repeats, rng, seq_len=n) for n in TUNE_SEQ_LENS
             if n <= max(prefill_lens)}
    report = {
        "compile": compile_s,
        "suite": "kernels", "quick": quick, "threads": thread_counts,
        "torch_installed": _torch_installed(), "cpu_count": os.cpu_count(),
        "prefill_tiles": {n: _short(t) for n, t in picks.items()},
        "decode_tiles": str(DECODE_TILES),
        "prefill": bench_prefill(prefill_lens, thread_counts, repeats, rng, picks),
        "decode": bench_decode([512, 4096] if quick else [512, 1024, 2048, 4096, 8192, 16384],
                               thread_counts, repeats, rng),
        "tiles": bench_tiles(1024 if quick else 2048, 4096, repeats, rng),
    }
    return publish(report, print_report, json_path)

