"""Replay the same requests through refimpl and Vidur, and print them side by side.

Kept out of the package: it reads Vidur's output, which refimpl never depends on. Procedure
in docs/calibration.md ("Side by side with Vidur").

    python scripts/vidur_compare.py export --num-requests 2000 --rate 6 --out trace.csv
    (run Vidur on trace.csv, as docs/calibration.md says)
    python scripts/vidur_compare.py compare --trace trace.csv --vidur RUN/request_metrics.csv

The trace is Vidur 0.0.26's trace-replay CSV (`Date`, `Time` in seconds, `PromptTokenCount`,
`CompletionTokenCount`); Vidur scales prompts by 0.3 and times by 0.04 unless told 1.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

import refimpl
from refimpl.workloads import make_workload, new_workload

DATE = "2023-08-21"  # Vidur keeps the trace rows of one date; any, if it is the one given
POLICY_OF = {"vllm": "prefill-first", "sarathi": "sarathi"}  # Vidur's name -> refimpl's


def export(args: argparse.Namespace) -> None:
    """Write a refimpl workload as Vidur's trace-replay CSV."""
    w = make_workload(args.workload, num_requests=args.num_requests, rate=args.rate, seed=0)
    with Path(args.out).open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["Date", "Time", "PromptTokenCount", "CompletionTokenCount"])
        for t, p, n in zip(w.arrival_s, w.prompt_tokens, w.output_tokens, strict=True):
            out.writerow([DATE, f"{t:.6f}", int(p), int(n)])
    print(f"wrote {len(w)} requests to {args.out}")


def _percentiles(values: np.ndarray) -> str:
    values = values[np.isfinite(values)]
    return " / ".join(f"{np.percentile(values, q) * 1e3:7.1f}" for q in (50, 99))


def compare(args: argparse.Namespace) -> None:
    """Replay the trace in refimpl and print it beside Vidur's request metrics."""
    with Path(args.trace).open() as f:
        rows = list(csv.DictReader(f))
    trace = new_workload("vidur-trace", np.array([float(r["Time"]) for r in rows]),
                         np.array([int(r["PromptTokenCount"]) for r in rows]),
                         np.array([int(r["CompletionTokenCount"]) for r in rows]))
    run = refimpl.simulate(trace, POLICY_OF[args.scheduler], model=args.model,
                           hardware=args.hardware, admission=False)
    r = run.requests
    ttft = r.first_token_s - r.arrival_s
    tpot = (r.finish_s - r.first_token_s) / np.maximum(r.num_generated - 1, 1)
    with Path(args.vidur).open() as f:
        vidur = list(csv.DictReader(f))
    v_ttft = np.array([float(x["prefill_e2e_time"]) for x in vidur])
    v_tpot = np.array([float(x["decode_time_execution_plus_preemption_normalized"])
                       for x in vidur])
    v_restarts = sum(int(float(x["request_num_restarts"])) for x in vidur)
    print(f"{len(rows)} requests, {args.model} on {args.hardware}; Vidur `{args.scheduler}` "
          f"beside refimpl `{POLICY_OF[args.scheduler]}`")
    print(f"{'':<10}{'TTFT p50 / p99 ms':>22}{'TPOT p50 / p99 ms':>22}{'preemptions':>13}")
    print(f"{'refimpl':<10}{_percentiles(ttft):>22}{_percentiles(tpot):>22}"
          f"{int(r.num_preemptions.sum()):>13}")
    print(f"{'vidur':<10}{_percentiles(v_ttft):>22}{_percentiles(v_tpot):>22}{v_restarts:>13}")


def main() -> None:
    """The two subcommands."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="write a workload as Vidur's trace CSV")
    e.add_argument("--workload", default="azure-conv-like")
    e.add_argument("--num-requests", type=int, default=2000)
    e.add_argument("--rate", type=float, default=6.0)
    e.add_argument("--out", default="trace.csv")
    e.set_defaults(run=export)
    c = sub.add_parser("compare", help="replay the trace in refimpl; print it beside Vidur's")
    c.add_argument("--trace", required=True)
    c.add_argument("--vidur", required=True, help="Vidur's request_metrics.csv of that run")
    c.add_argument("--scheduler", choices=list(POLICY_OF), default="vllm")
    c.add_argument("--model", default="llama-2-7b")
    c.add_argument("--hardware", default="a100-80gb")
    c.set_defaults(run=compare)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
