"""Reader of length-only CSVs (`num_prefill_tokens,num_decode_tokens,...`), e.g. ShareGPT stats.

Source of the known file: microsoft/sarathi-serve, data/processed_traces/
sharegpt_8k_filtered_stats_llama2_tokenizer.csv (Apache-2.0): prompt and response token counts
of ShareGPT conversations, with no timestamps. Such a file is a length distribution, so the
reader pairs its rows, in file order, with seeded Poisson arrivals at a rate the caller gives.
Other columns (`num_total_tokens`, `pd_ratio`) are ignored.
"""

from __future__ import annotations

from pathlib import Path

from refimpl.config._validate import seeded_rng
from refimpl.errors import ConfigError
from refimpl.workloads._columns import count_column, csv_columns
from refimpl.workloads.arrivals import poisson_arrivals
from refimpl.workloads.workload import Workload, new_workload

__all__ = ["LENGTH_COLUMNS", "read_length_csv"]

LENGTH_COLUMNS = ("num_prefill_tokens", "num_decode_tokens")


def read_length_csv(path: Path, lines: list[str], *, rate: float | None, seed: int) -> Workload:
    """Lengths from the file, arrivals from a Poisson process at `rate` requests/s."""
    columns = csv_columns(path, lines, LENGTH_COLUMNS)
    if rate is None:
        raise ConfigError("rate", rate, f"{path} has lengths only: give an arrival rate (req/s)")
    prompt_tokens = count_column(path, LENGTH_COLUMNS[0], columns[LENGTH_COLUMNS[0]], 2)
    output_tokens = count_column(path, LENGTH_COLUMNS[1], columns[LENGTH_COLUMNS[1]], 2)
    arrival_s = poisson_arrivals(len(prompt_tokens), rate, seeded_rng(seed))
    return new_workload(path.stem, arrival_s, prompt_tokens, output_tokens)
