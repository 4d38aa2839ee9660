"""Per-request and per-step tables, as CSV and Parquet, read back whole."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.errors import ConfigError
from refimpl.export import (
    REQUEST_COLUMNS,
    export_requests,
    export_steps,
    read_table,
    request_columns,
    write_table,
)
from refimpl.metrics.summary import summarize


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_request_records_round_trip_with_the_issue_columns(small_run, tmp_path, suffix):
    path = export_requests(small_run.requests, tmp_path / f"requests{suffix}")
    table = read_table(path)
    assert list(table) == list(REQUEST_COLUMNS)
    assert len(table["request_id"]) == len(small_run.requests) == 60
    for name in ("arrival_s", "first_token_s", "finish_s", "num_generated", "slo_class",
                 "status", "reason", "num_preemptions"):
        assert name in table
    arrivals = [float(v) for v in table["arrival_s"]]
    assert arrivals == [float(v) for v in small_run.requests.arrival_s]  # exact, even in CSV


def test_the_request_table_recomputes_the_summary(small_run):
    table = request_columns(small_run.requests)
    met = int(np.sum(table["meets_slo"]))
    assert met == summarize(small_run.requests)["num_slo_met"]
    ttft = table["ttft_s"][table["status"] == "finished"]
    assert np.allclose(ttft, table["first_token_s"][table["status"] == "finished"]
                       - table["arrival_s"][table["status"] == "finished"])


def test_several_policies_go_in_one_table_with_a_policy_column(small_run, tmp_path):
    path = export_requests({"a": small_run.requests, "b": small_run.requests},
                           tmp_path / "both.parquet")
    table = read_table(path)
    assert table["policy"] == ["a"] * 60 + ["b"] * 60


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_step_records_round_trip(small_run, tmp_path, suffix):
    table = read_table(export_steps(small_run.steps, tmp_path / f"steps{suffix}"))
    assert len(table["step"]) == len(small_run.steps)
    assert {"start_s", "duration_s", "num_decode", "num_prefill_tokens", "kv_used_pages",
            "num_waiting", "kv_total_pages"} <= set(table)


def test_missing_values_are_empty_in_csv_and_null_in_parquet(tmp_path):
    columns = {"x": [1.5, float("nan"), None], "name": ["a", "b", "c"]}
    assert read_table(write_table(columns, tmp_path / "t.csv"))["x"] == ["1.5", "", ""]
    assert read_table(write_table(columns, tmp_path / "t.parquet"))["x"] == [1.5, None, None]
    assert not list(tmp_path.glob(".*partial"))


def test_a_table_path_must_say_csv_or_parquet_and_columns_must_match(tmp_path):
    with pytest.raises(ConfigError, match=r"must end in \.csv or \.parquet"):
        write_table({"x": [1]}, tmp_path / "t.xlsx")
    with pytest.raises(ConfigError, match="same length"):
        write_table({"x": [1], "y": [1, 2]}, tmp_path / "t.csv")
