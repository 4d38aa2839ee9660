"""Run Vidur 0.0.26 offline, timed, set up as refimpl's replay; then price fixed steps with it.

Runs in Vidur's own environment (not refimpl's), after scripts/vidur_attention.py has laid
out the profiling data under CACHE:

    /tmp/vidurvenv/bin/python scripts/vidur_run.py --trace trace.csv --scheduler vllm \\
        --cache-dir CACHE --out OUT [-- more flags of python -m vidur.main]

It passes Vidur the setup scripts/vidur_compare.py replays in refimpl: Llama-2-7B on one
A100 (TP 1, PP 1); the trace replayed with its prefill, decode and time scale factors at 1;
16-token KV blocks, `--num-blocks` of them (refimpl's KV pages, which vidur_compare.py
checks); at most 256 requests running; `vllm` with 4,096 tokens a batch or `sarathi` with
512-token chunks; the predictor, `random_forrest` (Vidur's default) with one grid point (250
trees of depth 32, min split 2; Vidur's default grid is 27 points under 10-fold
cross-validation) and 2 folds, or `linear_regression` with its own grid and Vidur's 10 folds,
on the lattice of the attention table (KV granularity 32, 4,096 tokens, 256 sequences); no
plots, no Chrome trace, one row per batch in batch_metrics.csv.
`HF_HUB_OFFLINE=1` makes `snapshot_download` read the local cache (the predictions repo it
tries first then fails as offline, and Vidur trains its models and caches them in CACHE;
the cache key leaves out the predictor's grid and the data: one CACHE per predictor).
Into Vidur's output folder (printed) go `timing.json` (seconds to build the simulator, which
trains or loads the predictor, and to simulate) and `probe.json`: the predictor's time of
each step in PROBES, per operator in ms per layer, for vidur_compare.py `--probe`.

Two shims for bugs of 0.0.26, set before the run: `Request.restart` (a preemption) leaves the
request's pipeline-stage token count and prefill-stage flag as they were, so its next prefill
trips `assert self._num_stage_processed_tokens <= self.total_tokens` (every run with a
restart fails); here a restart resets them too. And `LinearRegressionExecutionTimePredictor`
lacks `_get_kv_parallel_communication_time`, so it cannot be built; here it gets the base
class's, as the random forest's does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # (read when huggingface_hub is imported)

from vidur.config import SimulationConfig
from vidur.entities import Batch, Request
from vidur.execution_time_predictor.linear_regression_execution_time_predictor import (
    LinearRegressionExecutionTimePredictor as LinearPredictor,
)
from vidur.execution_time_predictor.sklearn_execution_time_predictor import (
    SklearnExecutionTimePredictor,
)
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds

# name -> (prefill chunks as (tokens, tokens cached before it), (decodes, context of each))
PROBES = {
    "prefill 128": ([(128, 0)], (0, 0)),
    "prefill 512": ([(512, 0)], (0, 0)),
    "prefill 1000": ([(1000, 0)], (0, 0)),
    "prefill 2048": ([(2048, 0)], (0, 0)),
    "prefill 4000": ([(4000, 0)], (0, 0)),
    "4 prefills of 1000": ([(1000, 0)] * 4, (0, 0)),
    "chunk 512 after 1024": ([(512, 1024)], (0, 0)),
    "1 decode at 1000": ([], (1, 1000)),
    "32 decodes at 1000": ([], (32, 1000)),
    "128 decodes at 1000": ([], (128, 1000)),
    "64 decodes at 2000": ([], (64, 2000)),
    "32 decodes at 1000 + chunk 480": ([(480, 0)], (32, 1000)),
}
PARTS = ("attention_layer_pre_proj_execution_time", "attention_layer_post_proj_execution_time",
         "mlp_layer_up_proj_execution_time", "mlp_layer_down_proj_execution_time",
         "mlp_layer_act_execution_time", "attention_rope_execution_time", "attn_norm_time",
         "mlp_norm_time", "add_time", "attention_prefill_execution_time",
         "attention_decode_execution_time")


def _restart(request: Request, restart=Request.restart) -> None:
    restart(request)
    request._num_stage_processed_tokens = 0
    request._is_prefill_stage_complete = False


Request.restart = _restart
LinearPredictor._get_kv_parallel_communication_time = (
    SklearnExecutionTimePredictor._get_kv_parallel_communication_time)
LinearPredictor.__abstractmethods__ = frozenset()


def vidur_argv(args: argparse.Namespace) -> list[str]:
    """Vidur's command line for this setup (its flags are its config fields, flattened)."""
    p = f"--{args.predictor}_execution_time_predictor_config_"
    s = f"--{args.scheduler}_scheduler_config_"
    flags = {
        "--replica_config_model_name": "meta-llama/Llama-2-7b-hf",
        "--replica_config_device": "a100", "--replica_config_network_device": "a100_dgx",
        "--replica_config_tensor_parallel_size": 1, "--replica_config_num_pipeline_stages": 1,
        "--cache_config_block_size": 16, "--cache_config_num_blocks": args.num_blocks,
        "--request_generator_config_type": "trace_replay",
        "--trace_request_generator_config_trace_file": args.trace,
        "--trace_request_generator_config_date": "2023-08-21",
        "--trace_request_generator_config_prefill_scale_factor": 1,
        "--trace_request_generator_config_decode_scale_factor": 1,
        "--trace_request_generator_config_time_scale_factor": 1,
        "--trace_request_generator_config_max_tokens": 4096,
        "--replica_scheduler_config_type": args.scheduler,
        f"{s}batch_size_cap": 256,
        **({f"{s}max_tokens_in_batch": 4096} if args.scheduler == "vllm"
           else {f"{s}chunk_size": 512}),
        "--execution_time_predictor_config_type": args.predictor,
        f"{p}model_profiling_dataset": "local/refimpl-llama-2-7b-a100",
        f"{p}network_profiling_dataset": "local/a100-dgx", f"{p}cache_dir": args.cache_dir,
        f"{p}kv_cache_prediction_granularity": 32,
        f"{p}prediction_max_tokens_per_request": 4096,
        f"{p}prediction_max_prefill_chunk_size": 4096, f"{p}prediction_max_batch_size": 256,
        f"{p}k_fold_cv_splits": args.k_fold, f"{p}num_training_job_threads": 2,
        **({f"{p}num_estimators": 250, f"{p}max_depth": 32, f"{p}min_samples_split": 2}
           if args.predictor == "random_forrest" else {}),
        "--metrics_config_output_dir": args.out,
    }
    switches = ["--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace",
                "--metrics_config_keep_individual_batch_metrics",
                "--no-metrics_config_store_utilization_metrics"]
    return [x for k, v in flags.items() for x in (k, str(v))] + switches


def probe(sim: Simulator) -> dict:
    """Each PROBES step as one batch through the run's predictor: total ms and parts."""
    replica_id, scheduler = next(iter(sim.scheduler._replica_schedulers.items()))
    predictor = scheduler._execution_time_predictor
    out = {}
    for name, (chunks, (num_decodes, context)) in PROBES.items():
        requests, q, kv = [], [], []
        for tokens, cached in chunks:
            requests.append(Request(0.0, cached + tokens, 1))
            q.append(tokens)
            kv.append(cached + tokens)  # what Vidur's schedulers pass: KV after this step
        for _ in range(num_decodes):
            requests.append(Request(0.0, context, 2))
            q.append(1)
            kv.append(context)
        t = predictor.get_execution_time(Batch(replica_id, requests, q, kv), 0)
        out[name] = {"chunks": chunks, "decodes": [num_decodes, context],
                     "total_ms": t.total_time * 1e3, "num_layers": t.num_layers,
                     "per_layer_ms": {p: getattr(t, p) for p in PARTS}}
    return out


def main() -> None:
    """Build, run, time and probe one Vidur simulation."""
    argv = sys.argv[1:]
    own, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (
        argv, [])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True, help="vidur_compare.py export's CSV")
    parser.add_argument("--scheduler", choices=("vllm", "sarathi"), default="vllm")
    parser.add_argument("--predictor", choices=("random_forrest", "linear_regression"),
                        default="random_forrest")
    parser.add_argument("--cache-dir", required=True, help="vidur_attention.py's --cache-dir")
    parser.add_argument("--out", required=True, help="Vidur makes a dated folder in it")
    parser.add_argument("--num-blocks", type=int, default=7609,
                        help="KV blocks (refimpl's pages: Llama-2-7B on a100-80gb)")
    parser.add_argument("--k-fold", type=int, help="cross-validation folds (2 for the "
                        "random forest, Vidur's 10 for linear regression)")
    args = parser.parse_args(own)
    if args.k_fold is None:  # one grid point: the folds only cost time; else Vidur's 10
        args.k_fold = 2 if args.predictor == "random_forrest" else 10
    sys.argv = [sys.argv[0], *vidur_argv(args), *extra]
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)
    started = time.perf_counter()
    sim = Simulator(config)
    built = time.perf_counter()
    sim.run()
    ran = time.perf_counter()
    out = Path(config.metrics_config.output_dir)
    (out / "timing.json").write_text(json.dumps({"build_s": built - started,
                                                 "simulate_s": ran - built}))
    (out / "probe.json").write_text(json.dumps(probe(sim), indent=1))
    print(f"vidur: built in {built - started:.1f} s, simulated in {ran - built:.1f} s; "
          f"output in {out}")


if __name__ == "__main__":
    main()
