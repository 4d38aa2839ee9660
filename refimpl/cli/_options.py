"""Options shared by the subcommands that serve a workload (`simulate`, `demo`, `run`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from refimpl.config import MODEL_PRESETS, SLO_PRESETS, SLO_SETS, SLOSet, one_class, preset_names
from refimpl.config import slo_set as parse_slo_set
from refimpl.costmodel.choose import STEP_MODELS
from refimpl.sched import POLICIES
from refimpl.workloads import DEFAULT_WORKLOAD, synthetic_names


def add_workload_options(parser: argparse.ArgumentParser, *, model: str, hardware: str | None,
                         num_requests: int | None, rate: float | None = None,
                         out: Path | None = None, classes: str | None = None,
                         models: Sequence[str] = tuple(MODEL_PRESETS), model_help: str = ""
                         ) -> None:
    """--workload, --model, --hardware and --step-model (unless hardware is None), --rate,
    --num-requests, --seed, --slo or    --classes, --json, --out."""
    parser.add_argument("--workload", default=DEFAULT_WORKLOAD, metavar="NAME_OR_PATH",
                        help=f"a synthetic workload ({', '.join(synthetic_names())}) or a trace "
                        "file (Azure 2023 CSV, Mooncake JSONL, length-only CSV; detected) "
                        f"(default: {DEFAULT_WORKLOAD})")
    parser.add_argument("--model", default=model, choices=None if model_help else list(models),
                        help=(model_help or "model preset") + f" (default: {model})")
    if hardware is not None:
        parser.add_argument("--hardware", default=hardware, choices=list(preset_names()),
                            help=f"hardware preset (default: {hardware})")
        parser.add_argument("--step-model", default="auto", choices=list(STEP_MODELS),
                            help="the simulated clock: auto (calibrated to measured GPUs where "
                            "the preset has fitted figures), calibrated, or roofline (ideal "
                            "spec-sheet peaks) (default: auto)")
    parser.add_argument("--rate", type=float, default=rate, metavar="REQ_PER_S",
                        help="arrival rate in requests/s (default: "
                        + (f"{rate})" if rate else "the workload's own)"))
    parser.add_argument("--num-requests", type=int, default=num_requests, metavar="N",
                        help="serve the first N requests" + (
                            f" (default: {num_requests})" if num_requests else " (default: all)"))
    parser.add_argument("--seed", type=int, default=0, help="seed of synthetic workloads "
                        "and of generated arrivals (default: 0)")
    add_slo_options(parser, default=None if classes else "default", classes=classes)
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the report as JSON"
                        + (" (default: DIR/report.json)" if out else ""))
    parser.add_argument("--out", type=Path, default=out, metavar="DIR",
                        help="write plots (PNG) here" + (f" (default: {out})" if out else ""))


def add_export_options(parser: argparse.ArgumentParser) -> None:
    """--requests PATH, --steps PATH (.csv or .parquet), --trace PATH (Perfetto JSON)."""
    parser.add_argument("--requests", type=Path, metavar="PATH",
                        help="write every request's record (arrival, first token, finish, "
                        "tokens, class, status, reason, preemptions, latencies) as .csv or "
                        ".parquet")
    parser.add_argument("--steps", type=Path, metavar="PATH",
                        help="write every engine step's record as .csv or .parquet")
    parser.add_argument("--trace", type=Path, metavar="PATH",
                        help="write the steps as a Chrome/Perfetto trace (JSON; open it at "
                        "ui.perfetto.dev): prefill chunks and decode batches as slices, KV "
                        "use and queue length as counters")


def check_export_paths(args: argparse.Namespace) -> None:
    """Refuse export paths that could not be written, before the run."""
    from refimpl.cli._paths import check_output_path
    from refimpl.errors import ConfigError

    for name in ("requests", "steps"):
        path = getattr(args, name, None)
        if path is not None:
            if path.suffix.lower() not in (".csv", ".parquet"):
                raise ConfigError(name, str(path), "must end in .csv or .parquet")
            check_output_path(name, path)
    if getattr(args, "trace", None) is not None:
        check_output_path("trace", args.trace)


def add_prefix_cache_option(parser: argparse.ArgumentParser, default_where: str) -> None:
    """`--prefix-cache / --no-prefix-cache` (default: on where `default_where`)."""
    parser.add_argument("--prefix-cache", action=argparse.BooleanOptionalAction, default=None,
                        help="share the KV pages of cached prompt prefixes (default: on where "
                        f"{default_where}; --no-prefix-cache to compare)")


def add_policy_option(parser: argparse.ArgumentParser, default: str) -> None:
    """--policy NAME (or `all`)."""
    parser.add_argument("--policy", default=default, choices=[*POLICIES, "all"],
                        help=f"scheduling policy, or `all` side by side (default: {default})")


def add_slo_options(parser: argparse.ArgumentParser, default: str | None = "default",
                    classes: str | None = None) -> None:
    """--slo NAME or --classes NAME:SHARE,... (one of them); `default`: the --slo default, or
    None; `classes`: the mix used when neither is given (else the workload's own classes)."""
    group = parser.add_mutually_exclusive_group()
    fallback = f"--classes {classes}" if classes else "the benchmark's own classes"
    group.add_argument("--slo", default=default, metavar="NAME",
                       help=f"one SLO class for every request: {', '.join(SLO_PRESETS)} "
                       f"(default: {default or fallback})")
    group.add_argument("--classes", metavar="NAME:SHARE,...",
                       help="a mix of SLO classes, each request's class drawn with the seed, "
                       "priorities by tightness (shortest TTFT target first), e.g. "
                       f"interactive:0.3,batch:0.7; or a named set: {', '.join(SLO_SETS)}"
                       + (f" (default: {classes})" if classes else ""))
    parser.set_defaults(default_classes=classes)  # (not an option: what neither flag means)


def slo_set_of(args: argparse.Namespace) -> SLOSet | None:
    """The SLO set that --classes or --slo name (None when neither is given nor defaulted)."""
    if args.classes is not None:
        return parse_slo_set(args.classes)
    if args.slo is not None:
        return one_class(args.slo)
    return None if args.default_classes is None else parse_slo_set(args.default_classes)
