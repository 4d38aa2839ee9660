"""Replay the same requests through refimpl and Vidur, and print them side by side.

Kept out of the package: it reads Vidur's output, which refimpl never depends on. Procedure
in docs/calibration.md ("Side by side with Vidur"):

    python scripts/vidur_compare.py export --workload AzureLLMInferenceTrace_conv.csv \\
        --num-requests 2000 --rate 3 --out trace.csv
    (scripts/vidur_attention.py, then scripts/vidur_run.py on trace.csv)
    python scripts/vidur_compare.py compare --trace trace.csv --vidur RUN --scheduler vllm

`export` keeps the first N requests of a trace (or a synthetic workload), scales their
arrival times to `--rate` req/s (refimpl.workloads.scale_to_rate: the trace's own gaps,
stretched) and fits prompt + output into the model's context (refimpl.workloads
.clip_to_context), so Vidur's own length cap changes nothing; it writes Vidur 0.0.26's
trace-replay CSV (`Date`, `Time` in s, `PromptTokenCount`, `CompletionTokenCount`), for Vidur
to read with its prefill, decode and time scale factors at 1. `compare` replays that CSV in
refimpl with the limits Vidur is run with (max running requests, token budget per step,
16-token KV pages, as many pages as Vidur's `num_blocks`; no admission control), reads RUN
(Vidur's output folder, or the newest in vidur_run.py's --out: request_metrics.csv,
batch_metrics.csv, config.json, and vidur_run.py's timing.json and probe.json) and prints
Markdown tables.
TTFT is first token minus arrival in both (Vidur's `prefill_e2e_time`); TPOT is (finish - first
token) / (output tokens - 1) in both, Vidur's from `request_e2e_time - prefill_e2e_time` and
the exported output count (its own `decode_time_execution_plus_preemption_normalized` divides
by the whole output, re-counted after a restart).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

import refimpl
from refimpl.config import HardwareSpec, ModelConfig
from refimpl.costmodel.calibrated import CalibratedStepModel
from refimpl.costmodel.gpu_ops import op_s
from refimpl.costmodel.step import OP_FIELDS, step_s
from refimpl.workloads import clip_to_context, make_workload, new_workload, scale_to_rate

DATE = "2023-08-21"  # Vidur keeps the trace rows of one date; any, if it is the one given
POLICY_OF = {"vllm": "prefill-first", "sarathi": "sarathi"}  # Vidur's name -> refimpl's


def export(args: argparse.Namespace) -> None:
    """Write a workload as Vidur's trace-replay CSV."""
    w = make_workload(args.workload, num_requests=args.num_requests, seed=args.seed)
    w = clip_to_context(scale_to_rate(w, args.rate), ModelConfig.preset(args.model))
    with Path(args.out).open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["Date", "Time", "PromptTokenCount", "CompletionTokenCount"])
        for t, p, n in zip(w.arrival_s, w.prompt_tokens, w.output_tokens, strict=True):
            out.writerow([DATE, f"{t:.6f}", int(p), int(n)])
    print(f"wrote {len(w)} requests ({w.num_clipped} clipped to {args.model}'s context) "
          f"to {args.out}")


def _p(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values[np.isfinite(values)], q) * 1e3)


def _read_csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _refimpl_parts(model: CalibratedStepModel, chunks: list, decodes: list) -> dict:
    """refimpl's time of one step in ms: total, the four projections, the other operators
    (norms, rotary, activation, adds), what Vidur has no row for (LM head, embedding, the
    step overhead) and attention (the rest)."""
    c = model.coefficients
    tokens = sum(n for n, _ in chunks)
    pairs = sum(n * s + n * (n + 1) // 2 for n, s in chunks)
    seqs, context = decodes
    total = step_s(c, tokens, pairs, seqs, seqs * context)
    rows = dict(zip(OP_FIELDS, c.ops.T, strict=True))
    n = np.where(rows["decode_only"] > 0, seqs, tokens + seqs)
    each = rows["count"] * (rows["launch_s"] + op_s(
        rows["fixed_s"], rows["s_per_row"], rows["flop_s_per_row"], rows["floor_s"],
        rows["tile_rows"], rows["spill_rows"], rows["s_per_spill_row"], rows["sharpness"], n))
    each = np.where(n > 0, each, 0.0)
    # rows: the 4 projections, the LM head, then norm, rope, act, add, emb (calibrated.py)
    parts = {"total": total, "gemms": each[:4].sum(), "other ops": each[5:9].sum(),
             "lm head, emb, overhead": each[4] + each[9] + c.overhead_s}
    parts["attention"] = total - parts["gemms"] - parts["other ops"] - parts[
        "lm head, emb, overhead"]
    return {k: v * 1e3 for k, v in parts.items()}


def _vidur_parts(probe: dict) -> dict:
    layer = probe["per_layer_ms"]
    n = probe["num_layers"]
    gemms = sum(layer[k] for k in layer if "proj" in k)
    attention = layer["attention_prefill_execution_time"] + layer[
        "attention_decode_execution_time"]
    return {"total": probe["total_ms"], "gemms": gemms * n,
            "other ops": (sum(layer.values()) - gemms - attention) * n,
            "lm head, emb, overhead": 0.0, "attention": attention * n}


def compare(args: argparse.Namespace) -> None:
    """Replay the trace in refimpl; print it beside Vidur's run."""
    rows = _read_csv(Path(args.trace))
    outputs = np.array([int(r["CompletionTokenCount"]) for r in rows])
    trace = new_workload("vidur-trace", np.array([float(r["Time"]) for r in rows]),
                         np.array([int(r["PromptTokenCount"]) for r in rows]), outputs)
    run_dir = Path(args.vidur)
    if not (run_dir / "request_metrics.csv").is_file():  # vidur_run.py's --out: its newest run
        run_dir = max(run_dir.glob("*/request_metrics.csv")).parent
    config = json.loads((run_dir / "config.json").read_text())["cluster_config"]
    sched = config["replica_scheduler_config"]
    budget = sched.get("max_tokens_in_batch") or sched["chunk_size"]
    params = {"max_num_seqs": sched["batch_size_cap"], "token_budget": budget}
    model, hardware = ModelConfig.preset(args.model), HardwareSpec.preset(args.hardware)
    run = refimpl.simulate(trace, POLICY_OF[args.scheduler], model=model, hardware=hardware,
                           page_size=config["cache_config"]["block_size"],
                           policy_params=params, admission=False, prefix_cache=False)
    if run.settings["kv_pages"] != config["cache_config"]["num_blocks"]:
        raise SystemExit(f"refimpl has {run.settings['kv_pages']} KV pages, Vidur "
                         f"{config['cache_config']['num_blocks']} blocks: run Vidur with "
                         f"--cache_config_num_blocks {run.settings['kv_pages']}")
    r = run.requests
    ttft = r.first_token_s - r.arrival_s
    tpot = (r.finish_s - r.first_token_s) / np.maximum(r.num_generated - 1, 1)
    vidur = sorted(_read_csv(run_dir / "request_metrics.csv"), key=lambda x: int(x["Request Id"]))
    if len(vidur) != len(rows):
        raise SystemExit(f"Vidur finished {len(vidur)} of the {len(rows)} requests")
    v_ttft = np.array([float(x["prefill_e2e_time"]) for x in vidur])
    v_tpot = (np.array([float(x["request_e2e_time"]) for x in vidur]) - v_ttft) / np.maximum(
        outputs - 1, 1)
    v_restarts = sum(int(float(x["request_num_restarts"])) for x in vidur)
    batches = _read_csv(run_dir / "batch_metrics.csv")
    v_busy = sum(float(b["batch_execution_time"]) for b in batches)
    timing = json.loads((run_dir / "timing.json").read_text())
    print(f"{len(rows)} requests, {args.model} on {args.hardware}, Vidur `{args.scheduler}` "
          f"beside refimpl `{POLICY_OF[args.scheduler]}` {params}, "
          f"{run.settings['kv_pages']} KV pages of {run.settings['page_size']}\n")
    print("| simulator | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | preemptions | steps "
          "| busy s | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, t1, t2, pre, steps, busy, wall in (
            ("refimpl", ttft, tpot, int(r.num_preemptions.sum()), len(run.steps.duration_s),
             float(run.steps.duration_s.sum()),
             f"{run.wall_s:.2f} (+{run.settings['compile_s']:.0f} compile)"),
            ("Vidur", v_ttft, v_tpot, v_restarts, len(batches), v_busy,
             f"{timing['simulate_s']:.2f} (+{timing['build_s']:.0f} build)")):
        print(f"| {name} | {_p(t1, 50):.0f} ms | {_p(t1, 99):.0f} ms | {_p(t2, 50):.1f} ms "
              f"| {_p(t2, 99):.1f} ms | {pre} | {steps} | {busy:.1f} | {wall} |")
    if args.probe:
        step_model = CalibratedStepModel(model, hardware)
        print("\n| step (ms) | refimpl | Vidur | projections r / V | other ops r / V "
              "| attention r / V | LM head, emb, overhead r |")
        print("|---|---|---|---|---|---|---|")
        for name, p in json.loads((run_dir / "probe.json").read_text()).items():
            a, b = _refimpl_parts(step_model, p["chunks"], p["decodes"]), _vidur_parts(p)
            print(f"| {name} | {a['total']:.2f} | {b['total']:.2f} | {a['gemms']:.2f} / "
                  f"{b['gemms']:.2f} | {a['other ops']:.2f} / {b['other ops']:.2f} | "
                  f"{a['attention']:.2f} / {b['attention']:.2f} | "
                  f"{a['lm head, emb, overhead']:.2f} |")


def main() -> None:
    """The two subcommands."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="write a workload as Vidur's trace CSV")
    e.add_argument("--workload", default="azure-conv-like", help="a synthetic name or a trace")
    e.add_argument("--num-requests", type=int, default=2000)
    e.add_argument("--rate", type=float, default=6.0)
    e.add_argument("--seed", type=int, default=0, help="of a synthetic workload")
    e.add_argument("--model", default="llama-2-7b")
    e.add_argument("--out", default="trace.csv")
    e.set_defaults(run=export)
    c = sub.add_parser("compare", help="replay the trace in refimpl; print it beside Vidur's")
    c.add_argument("--trace", required=True)
    c.add_argument("--vidur", required=True,
                   help="Vidur's output folder of that run (or vidur_run.py's --out)")
    c.add_argument("--scheduler", choices=list(POLICY_OF), default="vllm")
    c.add_argument("--model", default="llama-2-7b")
    c.add_argument("--hardware", default="a100-80gb")
    c.add_argument("--probe", action="store_true", help="also the fixed steps of probe.json")
    c.set_defaults(run=compare)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
