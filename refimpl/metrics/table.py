"""Text tables of run summaries for people: one run in detail, or several policies side by side.

Both read the dicts that `summarize` returns. Latencies are shown in the unit that gives 1-999
(us, ms, s), rates with three significant figures, counts with thousands separators, and
missing figures (None) as '-'. Both say why requests were rejected, reasons by count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from refimpl.metrics.percentiles import PERCENTILES
from refimpl.report.units import format_seconds

__all__ = ["format_comparison", "format_fidelity", "format_headline", "format_reasons",
           "format_run", "render_columns"]

MISSING = "-"  # shown where a figure has no data (e.g. no finished requests)


def _seconds(value: float | None) -> str:
    if value is None:
        return MISSING
    return "0 s" if value == 0 else format_seconds(value)  # not '0 ns': zero has no scale


def _number(value: float | None) -> str:
    if value is None:
        return MISSING
    # Three significant figures, but whole thousands rather than '4.56e+03'.
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _percent(value: float | None) -> str:
    return MISSING if value is None else f"{100 * value:.1f}%"


def _count(value: int | None) -> str:
    return MISSING if value is None else f"{value:,}"


def format_reasons(counts: dict[str, int], none: str = "none") -> str:
    """`exceeds_context 1,100, ttft_p95 103`: reasons by count, most first (`none` if empty)."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{reason} {_count(n)}" for reason, n in ordered) or none


# The side-by-side columns: (header, summary key, formatter).
COMPARISON_COLUMNS: tuple[tuple[str, str, Callable], ...] = (
    ("done", "num_finished", _count),
    ("rejected", "num_rejected", _count),
    ("preempted", "num_preempted", _count),
    ("TTFT p50", "ttft_p50_s", _seconds),
    ("TTFT p99", "ttft_p99_s", _seconds),
    ("TPOT p50", "tpot_p50_s", _seconds),
    ("TPOT p99", "tpot_p99_s", _seconds),
    ("e2e p95", "e2e_p95_s", _seconds),
    ("tok/s", "throughput_tok_s", _number),
    ("good req/s", "goodput_req_s", _number),
    ("SLO met", "slo_attainment", _percent),
    ("KV peak", "kv_util_peak", _percent),
    ("decide p99", "decision_p99_s", _seconds),
)
# Shown where some run had a prefix cache (refimpl.kv.prefix).
PREFIX_COLUMNS: tuple[tuple[str, str, Callable], ...] = (
    ("prefix hits", "prefix_hit_rate_tokens", _percent),
    ("evicted", "prefix_evicted_blocks", _count),
)

# The latency rows of the one-run table: (label, key prefix in the summary).
LATENCY_ROWS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("end-to-end", "e2e"),
                ("queueing", "queue"))


def render_columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Aligned columns: the first left-aligned (names), the rest right-aligned (figures)."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        return "  ".join([first.ljust(widths[0])]
                         + [cell.rjust(width) for cell, width in zip(rest, widths[1:],
                                                                      strict=True)]).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def format_comparison(summaries: dict[str, dict]) -> str:
    """Policies side by side: a row per policy (in the given order), key figures as columns;
    below, a line per policy that rejected requests, saying why."""
    columns = COMPARISON_COLUMNS + (
        PREFIX_COLUMNS if any("prefix_hit_rate_tokens" in s for s in summaries.values()) else ())
    header = ["policy", *(title for title, _, _ in columns)]
    rows = [[name, *(fmt(summary.get(key)) for _, key, fmt in columns)]
            for name, summary in summaries.items()]
    # Below the table, not a column: reason lists vary in length and would stretch every row.
    rejecting = {name: s for name, s in summaries.items() if s.get("num_rejected")}
    width = max((len(name) for name in rejecting), default=0)
    why = [f"  {name:<{width}}  rejected {_count(s['num_rejected'])}: "
           f"{format_reasons(s.get('rejected_by_reason') or {})}"
           for name, s in rejecting.items()]
    return "\n".join([render_columns(header, rows),
                      *(["", "rejected by reason:", *why] if why else [])])


def format_headline(summaries: dict[str, dict], policy: str = "slo") -> str | None:
    """One line: what `policy` bought beside the best other policy (None if it is absent or
    alone)."""
    mine = summaries.get(policy)
    others = {name: s for name, s in summaries.items() if name != policy}
    if mine is None or not others:
        return None
    name, best = max(others.items(), key=lambda item: item[1].get("slo_attainment") or 0.0)
    gain = ((mine.get("slo_attainment") or 0.0) - (best.get("slo_attainment") or 0.0)) * 100
    return (f"{policy} met both SLOs for {_percent(mine.get('slo_attainment'))} of requests "
            f"({_number(mine.get('goodput_req_s'))} good req/s); the best other policy, {name}, "
            f"for {_percent(best.get('slo_attainment'))} ({_number(best.get('goodput_req_s'))} "
            f"good req/s): {gain:+.1f} points")


def format_run(summary: dict, title: str = "run") -> str:
    """One run in detail: counts, a latency table (percentiles and mean), rates, KV and policy."""
    s = summary
    header = ["latency", *(f"p{q}" for q in PERCENTILES), "mean"]
    rows = [[label, *(_seconds(s[f"{prefix}_p{q}_s"]) for q in PERCENTILES),
             _seconds(s[f"{prefix}_mean_s"])] for label, prefix in LATENCY_ROWS]
    lines = [
        f"{title}: {_count(s['num_requests'])} requests, {_count(s['num_finished'])} finished, "
        f"{_count(s['num_rejected'])} rejected, {_count(s['num_preempted'])} preempted "
        f"({_count(s['num_preemptions'])} preemptions)",
        f"  finished by reason: {format_reasons(s['finished_by_reason'])}",
        f"  rejected by reason: {format_reasons(s['rejected_by_reason'])}",
        "",
        render_columns(header, rows),
        "",
        f"SLO attainment {_percent(s['slo_attainment'])} "
        f"(TTFT met {s['num_ttft_met']}, TPOT met {s['num_tpot_met']}, both {s['num_slo_met']}"
        f" of {s['num_requests']})",
        f"goodput {_number(s['goodput_req_s'])} req/s, throughput "
        f"{_number(s['throughput_tok_s'])} tok/s over {_seconds(s['makespan_s'])}",
    ]
    if s.get("num_steps") is not None:
        lines += [
            f"steps {s['num_steps']} (busy {_seconds(s['busy_s'])}), mean decode batch "
            f"{_number(s['decode_batch_mean'])}, mean prefill tokens/step "
            f"{_number(s['prefill_tokens_per_step_mean'])}, peak waiting {s['waiting_peak']}",
            f"KV use mean {_percent(s['kv_util_mean'])}, peak {_percent(s['kv_util_peak'])} "
            f"({s['kv_peak_pages']} of {s['kv_total_pages']} pages)",
            f"policy decision time per step p50 {_seconds(s['decision_p50_s'])}, "
            f"p99 {_seconds(s['decision_p99_s'])}, total {_seconds(s['decision_total_s'])}",
        ]
    if "prefix_hit_rate_tokens" in s:
        lines.append(
            f"prefix cache: hits {_percent(s['prefix_hit_rate_tokens'])} of prompt tokens, "
            f"{_percent(s['prefix_hit_rate_blocks'])} of blocks ({s['prefix_hit_blocks']}); "
            f"peak {s['prefix_cached_pages_peak']} pages cached, "
            f"{s['prefix_evicted_blocks']} blocks evicted")
    return "\n".join(lines)


def format_fidelity(report: dict, title: str = "real vs simulated") -> str:
    """A real run against its simulated replay (refimpl.metrics.fidelity): latency
    percentiles on both clocks with the error (and at the run's speed, where replayed), then
    the per-step prediction errors."""
    at_speed = report.get("latency_at_speed")
    rows = []
    for key, v in report["latency"].items():
        row = [key.removesuffix("_s").replace("_", " "), _seconds(v["real"]),
               _seconds(v["simulated"]), _signed_percent(v["error"])]
        if at_speed is not None:
            row += [_seconds(at_speed[key]["simulated"]), _signed_percent(at_speed[key]["error"])]
        rows.append(row)
    attained = report["slo_attainment"]
    rows.append(["SLO attainment", _percent(attained["real"]), _percent(attained["simulated"]),
                 ""] + ([_percent(attained["at_speed"]), ""] if at_speed is not None else []))
    header = ["", "real", "simulated", "error"]
    if at_speed is not None:
        header += [f"at run speed (x{report['speed']:.2f})", "error"]
    lines = [title, render_columns(header, rows)]
    for name, errors in (("offline", report["offline"]), ("calibrated", report["calibrated"])):
        lines.append(f"step time, {name} prediction: MAPE {_percent(errors['mape'])}, "
                     f"signed {_signed_percent(errors['signed'])} over {errors['steps']:,} steps")
    return "\n".join(lines)


def _signed_percent(value: float | None) -> str:
    return MISSING if value is None or value != value else f"{100 * value:+.1f}%"
