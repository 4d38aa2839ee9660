"""Text tables of run summaries for people: one run in detail, or several policies side by side.

Both read the dicts that `summarize` returns. Latencies are shown in the unit that gives 1-999
(us, ms, s), rates with three significant figures, and missing figures (None) as '-'.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from refimpl.metrics.percentiles import PERCENTILES
from refimpl.report.units import format_seconds

__all__ = ["format_comparison", "format_run"]

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
    return MISSING if value is None else str(value)


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

# The latency rows of the one-run table: (label, key prefix in the summary).
LATENCY_ROWS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("end-to-end", "e2e"),
                ("queueing", "queue"))


def _render(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
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
    """Policies side by side: a row per policy (in the given order), key figures as columns."""
    header = ["policy", *(title for title, _, _ in COMPARISON_COLUMNS)]
    rows = [[name, *(fmt(summary.get(key)) for _, key, fmt in COMPARISON_COLUMNS)]
            for name, summary in summaries.items()]
    return _render(header, rows)


def _reasons(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in counts.items()) or "none"


def format_run(summary: dict, title: str = "run") -> str:
    """One run in detail: counts, a latency table (percentiles and mean), rates, KV and policy."""
    s = summary
    header = ["latency", *(f"p{q}" for q in PERCENTILES), "mean"]
    rows = [[label, *(_seconds(s[f"{prefix}_p{q}_s"]) for q in PERCENTILES),
             _seconds(s[f"{prefix}_mean_s"])] for label, prefix in LATENCY_ROWS]
    lines = [
        f"{title}: {s['num_requests']} requests, {s['num_finished']} finished, "
        f"{s['num_rejected']} rejected, {s['num_preempted']} preempted "
        f"({s['num_preemptions']} preemptions)",
        f"  finished by reason: {_reasons(s['finished_by_reason'])}",
        f"  rejected by reason: {_reasons(s['rejected_by_reason'])}",
        "",
        _render(header, rows),
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
    return "\n".join(lines)
