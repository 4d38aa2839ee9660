"""`refimpl pareto`: show a cost table's Pareto frontiers, as text, JSON or a plot."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from refimpl.cli._paths import check_output_path
from refimpl.report.units import format_bytes, format_seconds


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `pareto` subcommand."""
    parser = subparsers.add_parser(
        "pareto", help="Pareto frontiers (time vs HBM bytes) of kernel candidates under S",
        description="Show, per (phase, B, T), the candidates within the SRAM budget that no "
        "other beats on both predicted time and HBM bytes. Spec-sheet hardware gets an "
        "analytic (roofline) table; this CPU reads its profiled table.")
    parser.add_argument("--table", metavar="FILE", type=Path, help="a table saved by `refimpl "
                        "profile` (default: this machine's, or analytic for --hardware)")
    parser.add_argument("--hardware", default="cpu-local", help="hardware preset (GPU presets "
                        "give analytic tables; default: cpu-local)")
    parser.add_argument("--model", default="tiny", help="model preset (default: tiny)")
    parser.add_argument("--sram-budget", type=int, metavar="BYTES", help="SRAM budget S "
                        "(default: the table's)")
    parser.add_argument("--json", metavar="PATH", type=Path, help="write every candidate per "
                        "(phase, B, T) as JSON")
    parser.add_argument("--plot", metavar="PNG", type=Path, help="plot each phase's frontier "
                        "at its middle grid point")
    parser.set_defaults(run=run)


def _load(args: argparse.Namespace):
    from refimpl.config import HardwareSpec, ModelConfig
    from refimpl.costmodel.roofline import roofline_table
    from refimpl.costmodel.table import default_table_path, load_table
    from refimpl.errors import ConfigError

    if args.table is not None:
        return load_table(args.table)
    hardware = HardwareSpec.preset(args.hardware)
    model = ModelConfig.preset(args.model)
    if hardware.analytic:
        return roofline_table(model, hardware)
    path = default_table_path(model.name)
    if not path.exists():
        raise ConfigError("--table", None, f"no profiled table for {model.name} on this "
                          f"machine at {path}: run `refimpl profile --quick` first")
    return load_table(path)


def report(table) -> dict:
    """The JSON report: per (phase, B, T) every candidate and whether it is on the frontier."""
    entries = []
    for phase, t in table.phases.items():
        frontier = t.on_frontier(table.sram_budget_bytes)
        for i, batch in enumerate(t.batches):
            for j, seq_len in enumerate(t.seq_lens):
                entries.append({"phase": phase, "B": batch, "T": seq_len, "candidates": [
                    {"name": c.name, "params": c.params, "sram_bytes": c.sram_bytes,
                     "hbm_bytes": t.hbm_bytes[k][i][j], "flops": t.flops[k][i][j],
                     "time_s": t.time_s[k][i][j],
                     "within_budget": c.sram_bytes <= table.sram_budget_bytes,
                     "on_frontier": frontier[i][j][k]} for k, c in enumerate(t.candidates)]})
    return {"sram_budget_bytes": table.sram_budget_bytes, "model": table.model_name,
            "analytic": table.is_analytic(), "fingerprint": table.fingerprint,
            "version": table.version, "shapes": entries}


def _plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    phases = sorted({e["phase"] for e in data["shapes"]})
    fig, axes = plt.subplots(1, len(phases), figsize=(5 * len(phases), 4), squeeze=False)
    for ax, phase in zip(axes[0], phases, strict=True):
        shapes = [e for e in data["shapes"] if e["phase"] == phase]
        entry = shapes[len(shapes) // 2]
        groups: dict[str, list] = {"over budget": [], "within budget": [], "frontier": []}
        for c in entry["candidates"]:
            key = "frontier" if c["on_frontier"] else (
                "within budget" if c["within_budget"] else "over budget")
            groups[key].append(c)
        for (label, pts), style in zip(groups.items(), ("x", "o", "*"), strict=True):
            ax.plot([c["time_s"] * 1e3 for c in pts], [c["hbm_bytes"] / 2**20 for c in pts],
                    style, label=label)
        ax.set(title=f"{phase} B={entry['B']} T={entry['T']}", xlabel="predicted time (ms)",
               ylabel="HBM traffic (MiB)")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    """Load or build the table, print a summary, and write the JSON and plot if asked."""
    for field in ("json", "plot"):
        if getattr(args, field) is not None:
            check_output_path(field, getattr(args, field))
    table = _load(args)
    if args.sram_budget is not None:
        table = table.with_budget(args.sram_budget)
    kind = "analytic (roofline of spec-sheet figures)" if table.is_analytic() else "profiled"
    print(f"{table.model_name}: {kind} table, SRAM budget "
          f"{format_bytes(table.sram_budget_bytes)}")
    data = report(table)
    print(f"  {'phase':<8}{'B':>6}{'T':>7}  {'frontier':>8}  {'within S':>8}  pick")
    for e in data["shapes"]:
        front = [c for c in e["candidates"] if c["on_frontier"]]
        fits = sum(c["within_budget"] for c in e["candidates"])
        best = min(front, key=lambda c: c["time_s"])
        print(f"  {e['phase']:<8}{e['B']:>6}{e['T']:>7}  {len(front):>8}  {fits:>8}  "
              f"{best['name']} ({format_seconds(best['time_s'])}, "
              f"{format_bytes(best['hbm_bytes'])})")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1))
        print(f"wrote {args.json}")
    if args.plot is not None:
        _plot(data, args.plot)
        print(f"wrote {args.plot}")
    return 0
