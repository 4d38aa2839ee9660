"""Lay out Vidur 0.0.26's profiling data offline, its attention table from refimpl's model.

Vidur (github.com/microsoft/vidur) loads its operator profiles with
`huggingface_hub.snapshot_download`; with `HF_HUB_OFFLINE=1` that reads a local Hugging Face
cache, which this script writes under Vidur's predictor `cache_dir`:

    python scripts/vidur_attention.py --mlp \\
        /work/shared/profiles/vidur/compute_a100_meta-llama_Llama-2-7b-hf_mlp.csv \\
        --cache-dir /tmp/vidur_cache

- compute dataset `local/refimpl-llama-2-7b-a100`: `config.json`, `mlp.csv.xz` (the measured
  profile given, rows as they are) and `attention.csv.xz` (below);
- network dataset `local/a100-dgx`: `config.json` only (TP 1 and PP 1 read no network file).

There is no public attention profile, so every row of `attention.csv.xz` is refimpl's
analytic attention (refimpl.costmodel.calibrated, `step_s` in refimpl.costmodel.step) for the
given model and hardware preset, divided evenly over the layers, in ms per layer:
- prefill row (kv_cache_size K, prefill_chunk_size C, batch 1): a C-token chunk after K - C
  cached tokens, `(prefill_fixed_s + max(pairs * attn_s_per_pair, C * new_token_s)) / layers`
  with pairs = C * (K - C) + C * (C + 1) / 2. K counts the chunk because Vidur 0.0.26 looks
  prefill attention up by the request's KV length after the chunk (processed + chunk tokens,
  rounded up to `granularity`), the chunk rounded up to 32; rows with K < C are never looked
  up and are left out;
- decode row (batch B, kv_cache_size K): B sequences of K context tokens each,
  `(decode_fixed_s + max(B * K * attn_s_per_context_token,
  B * K * kv_s_per_context_token + B * new_token_s)) / layers` (Vidur looks decode up by the
  batch size and the mean KV length rounded up to `granularity`).
The rows cover the lattice Vidur predicts on (K to `max_tokens` by `granularity`, C to
`max_tokens` by 32, B to `max_batch`), so its regressors interpolate nothing. One difference
stays: refimpl charges the prefill launches once per step, Vidur once per prompt chunk.
Run Vidur with `kv_cache_prediction_granularity`, `prediction_max_tokens_per_request`,
`prediction_max_prefill_chunk_size` and `prediction_max_batch_size` equal to these options.
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
from pathlib import Path

import numpy as np

from refimpl.config import HardwareSpec, ModelConfig
from refimpl.costmodel.calibrated import CalibratedStepModel

COMMIT = "0" * 40  # the snapshot name in the local cache (any 40 hex digits)


def attention_rows(model: ModelConfig, hardware: HardwareSpec, granularity: int,
                   max_tokens: int, max_batch: int) -> tuple[np.ndarray, np.ndarray]:
    """(prefill rows, decode rows), columns (batch, chunk, kv, ms per layer)."""
    c = CalibratedStepModel(model, hardware).coefficients
    ms = 1e3 / model.num_layers
    kv, chunk = np.meshgrid(np.arange(granularity, max_tokens + 1, granularity),
                            np.arange(32, max_tokens + 1, 32), indexing="ij")
    kv, chunk = kv[kv >= chunk], chunk[kv >= chunk]
    pairs = chunk * (kv - chunk) + chunk * (chunk + 1) / 2
    prefill = (c.prefill_fixed_s + np.maximum(pairs * c.attn_s_per_pair,
                                              chunk * c.new_token_s)) * ms
    batch, ctx = np.meshgrid(np.arange(1, max_batch + 1),
                             np.arange(granularity, max_tokens + 1, granularity), indexing="ij")
    batch, ctx = batch.ravel(), ctx.ravel()
    decode = (c.decode_fixed_s + np.maximum(
        batch * ctx * c.attn_s_per_context_token,
        batch * ctx * c.kv_s_per_context_token + batch * c.new_token_s)) * ms
    return (np.column_stack([np.ones_like(kv), chunk, kv, prefill]),
            np.column_stack([batch, np.zeros_like(ctx), ctx, decode]))


def write_attention(path: Path, model: ModelConfig, rows: tuple[np.ndarray, np.ndarray],
                    block_size: int) -> None:
    """Vidur's attention.csv columns (those its predictor reads), xz-compressed."""
    shape = (f"{model.hidden_size},{model.num_heads},{model.num_kv_heads},{block_size},1,"
             f"{model.max_context}")
    with lzma.open(path, "wt") as f:
        f.write("n_embd,n_q_head,n_kv_head,block_size,num_tensor_parallel_workers,"
                "max_model_len,batch_size,prefill_chunk_size,kv_cache_size,is_prefill,"
                "time_stats.attn_prefill.median,time_stats.attn_decode.median\n")
        for is_prefill, table in zip((True, False), rows, strict=True):
            for b, ch, k, t in table:
                times = f"{t:.6g}," if is_prefill else f",{t:.6g}"
                f.write(f"{shape},{int(b)},{int(ch)},{int(k)},{is_prefill},{times}\n")


def snapshot(cache_dir: Path, kind: str, repo: str) -> Path:
    """A fresh snapshot folder of dataset `repo` in Vidur's cache, the way the hub lays it."""
    root = cache_dir / "profiling_data" / kind / f"datasets--{repo.replace('/', '--')}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(COMMIT)
    folder = root / "snapshots" / COMMIT
    folder.mkdir(parents=True)
    return folder


def main() -> None:
    """Write both datasets; print the Vidur flags that name them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mlp", required=True, help="Vidur's measured compute profile CSV")
    parser.add_argument("--cache-dir", required=True, help="Vidur's predictor cache_dir")
    parser.add_argument("--model", default="llama-2-7b")
    parser.add_argument("--hardware", default="a100-80gb")
    parser.add_argument("--vidur-model", default="meta-llama/Llama-2-7b-hf")
    parser.add_argument("--device", default="a100")
    parser.add_argument("--network-device", default="a100_dgx")
    parser.add_argument("--granularity", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--block-size", type=int, default=16)
    args = parser.parse_args()
    model, hardware = ModelConfig.preset(args.model), HardwareSpec.preset(args.hardware)
    if hardware.num_gpus != 1:
        parser.error("only one GPU (TP 1): the attention rows are for one device")
    cache = Path(args.cache_dir)
    compute_repo = f"local/refimpl-{args.model}-{args.device}"
    folder = snapshot(cache, "compute", compute_repo)
    (folder / "config.json").write_text(json.dumps({"model": args.vidur_model,
                                                    "device_sku": args.device}))
    with Path(args.mlp).open("rb") as src, lzma.open(folder / "mlp.csv.xz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    rows = attention_rows(model, hardware, args.granularity, args.max_tokens, args.max_batch)
    write_attention(folder / "attention.csv.xz", model, rows, args.block_size)
    network_repo = f"local/{args.network_device.replace('_', '-')}"
    (snapshot(cache, "network", network_repo) / "config.json").write_text(
        json.dumps({"sku": args.network_device}))
    print(f"{len(rows[0])} prefill and {len(rows[1])} decode rows in {folder}")
    print(f"Vidur flags: ..._model_profiling_dataset {compute_repo} "
          f"..._network_profiling_dataset {network_repo} ..._cache_dir {cache}")


if __name__ == "__main__":
    main()
