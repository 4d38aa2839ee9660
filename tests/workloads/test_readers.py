"""Trace readers on small files: exact values, format detection, and every malformed case."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from refimpl.errors import ConfigError, TraceFormatError
from refimpl.workloads import detect_format, load_trace, make_workload

AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:15:50.9951691,1,1\n"
    "2023-11-16 18:16:00.0000000,2048,7"  # no trailing newline, like the published files
)
MOONCAKE = (
    '{"timestamp": 0, "input_length": 600, "output_length": 6, "hash_ids": [0, 1]}\n'
    '{"timestamp": 1500, "input_length": 100, "output_length": 2, "hash_ids": [0]}\n'
    '{"timestamp": 1500, "input_length": 1025, "output_length": 9, "hash_ids": [0, 2, 3]}\n'
)
LENGTHS = (
    "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
    "74,918,992,0.0806\n290,905,1195,0.3204\n7,3,10,2.3333\n"
)


def write(tmp_path: Path, text: str, name: str = "trace.txt") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_azure_timestamps_are_parsed_exactly_to_seconds_from_the_first_row(tmp_path):
    workload = load_trace(write(tmp_path, AZURE, "azure.csv"))
    # 18:15:50.9951690 - 18:15:46.6805900 = 4.3145790 s, exactly, in 100 ns units.
    np.testing.assert_array_equal(workload.arrival_s, [0.0, 4.314579, 4.3145791, 13.31941])
    np.testing.assert_array_equal(workload.prompt_tokens, [374, 396, 1, 2048])
    np.testing.assert_array_equal(workload.output_tokens, [44, 109, 1, 7])
    assert workload.name == "azure" and workload.hash_ids is None
    assert workload.arrival_s.dtype == np.float64 and workload.prompt_tokens.dtype == np.int64


def test_azure_columns_may_come_in_any_order_and_fractions_may_be_short(tmp_path):
    text = (
        "GeneratedTokens,TIMESTAMP,ContextTokens\n"
        "5,2023-11-16 00:00:00,9\n"
        "6,2023-11-16 00:00:01.5,8"
    )
    workload = load_trace(write(tmp_path, text))
    np.testing.assert_array_equal(workload.arrival_s, [0.0, 1.5])
    np.testing.assert_array_equal(workload.prompt_tokens, [9, 8])
    np.testing.assert_array_equal(workload.output_tokens, [5, 6])


def test_mooncake_keeps_hash_ids_and_converts_milliseconds(tmp_path):
    workload = load_trace(write(tmp_path, MOONCAKE, "mc.jsonl"))
    np.testing.assert_array_equal(workload.arrival_s, [0.0, 1.5, 1.5])
    np.testing.assert_array_equal(workload.prompt_tokens, [600, 100, 1025])
    np.testing.assert_array_equal(workload.output_tokens, [6, 2, 9])
    assert workload.hash_ids == ((0, 1), (0,), (0, 2, 3))


def test_length_only_csv_gets_seeded_poisson_arrivals_at_the_given_rate(tmp_path):
    path = write(tmp_path, LENGTHS, "sharegpt.csv")
    workload = load_trace(path, rate=4.0, seed=3)
    np.testing.assert_array_equal(workload.prompt_tokens, [74, 290, 7])
    np.testing.assert_array_equal(workload.output_tokens, [918, 905, 3])
    assert workload.arrival_s[0] == 0.0 and np.all(np.diff(workload.arrival_s) >= 0)
    np.testing.assert_array_equal(workload.arrival_s, load_trace(path, rate=4.0, seed=3).arrival_s)
    assert not np.array_equal(workload.arrival_s, load_trace(path, rate=4.0, seed=4).arrival_s)


def test_length_only_csv_without_a_rate_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="rate=None"):
        load_trace(write(tmp_path, LENGTHS))


def test_a_rate_given_for_an_arrival_trace_rescales_it(tmp_path):
    workload = load_trace(write(tmp_path, AZURE), rate=1.0)
    assert workload.mean_rate == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [(AZURE, "azure"), (MOONCAKE, "mooncake"), (LENGTHS, "lengths")],
)
def test_format_is_detected_from_the_first_line_not_the_name(tmp_path, text, expected):
    path = write(tmp_path, text, "no_extension")
    assert detect_format(path, text.splitlines()[0]) == expected


def test_make_workload_reads_a_trace_path_and_keeps_the_first_n(tmp_path):
    workload = make_workload(str(write(tmp_path, AZURE)), num_requests=2)
    np.testing.assert_array_equal(workload.prompt_tokens, [374, 396])


def test_make_workload_names_the_synthetic_workloads_when_the_spec_is_unknown():
    with pytest.raises(ConfigError, match="azure-conv-like") as error:
        make_workload("no-such-workload")
    assert error.value.field == "workload"


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = "2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize(
    ("text", "line", "field", "match"),
    [
        ("", 1, "file", "empty"),
        ("\n\n", 1, "file", "empty"),
        (AZURE_HEADER, 2, "rows", "no requests"),
        ("TIMESTAMP,ContextTokens\n" + ROW, 1, "GeneratedTokens", "missing column"),
        (AZURE_HEADER + ROW + "2023-11-16 18:15:47.0,5\n", 3, "GeneratedTokens", "found 2"),
        (AZURE_HEADER + ROW + "2023-11-16 18:15:47.0,-5,3\n", 3, "ContextTokens", "negative"),
        (AZURE_HEADER + ROW + "2023-11-16 18:15:47.0,5,0\n", 3, "GeneratedTokens", "zero"),
        (AZURE_HEADER + ROW + "2023-11-16 18:15:47.0,5,abc\n", 3, "GeneratedTokens", "whole"),
        (AZURE_HEADER + ROW + "2023-11-16 18:15:47.0,5.5,3\n", 3, "ContextTokens", "whole"),
        (AZURE_HEADER + ROW + "2023-11-16 18:15:45.0,5,3\n", 3, "TIMESTAMP", "backwards"),
        (AZURE_HEADER + ROW + "yesterday,5,3\n", 3, "TIMESTAMP", "not a YYYY"),
        (AZURE_HEADER + ROW + "2023-11-16 18:15:47.x1,5,3\n", 3, "TIMESTAMP", "not a YYYY"),
        ("foo,bar\n1,2\n", 1, "format", "unknown trace format"),
        ("num_prefill_tokens,pd_ratio\n1,2\n", 1, "num_decode_tokens", "missing column"),
        ("num_prefill_tokens,num_decode_tokens\n5,6\n5,-1\n", 3, "num_decode_tokens", "negative"),
    ],
)
def test_malformed_csv_names_file_line_and_field(tmp_path, text, line, field, match):
    path = write(tmp_path, text)
    with pytest.raises(TraceFormatError, match=match) as error:
        load_trace(path, rate=1.0)
    assert error.value.where == f"{path}:{line}"
    assert error.value.field == field


MC = '{"timestamp": 0, "input_length": 5, "output_length": 6, "hash_ids": [0]}\n'


@pytest.mark.parametrize(
    ("bad_row", "field", "match"),
    [
        ('{"timestamp": 1, "input_length": 5, "hash_ids": [0]}', "output_length", "missing"),
        (
            '{"timestamp": 1, "input_length": -5, "output_length": 6, "hash_ids": [0]}',
            "input_length",
            "negative",
        ),
        (
            '{"timestamp": 1, "input_length": "5", "output_length": 6, "hash_ids": [0]}',
            "input_length",
            "whole",
        ),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": 0, "hash_ids": [0]}',
            "output_length",
            "zero",
        ),
        (
            '{"timestamp": -1, "input_length": 5, "output_length": 6, "hash_ids": [0]}',
            "timestamp",
            "backwards",
        ),
        (
            '{"timestamp": "x", "input_length": 5, "output_length": 6, "hash_ids": [0]}',
            "timestamp",
            "milliseconds",
        ),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": 6, "hash_ids": ["a"]}',
            "hash_ids",
            "integers",
        ),
        ('{"timestamp": 1, "input_length": 5,', "json", "not JSON"),
        ("[1, 2]", "json", "not a JSON object"),
    ],
)
def test_malformed_mooncake_names_file_line_and_field(tmp_path, bad_row, field, match):
    path = write(tmp_path, MC + MC + bad_row + "\n")
    with pytest.raises(TraceFormatError, match=match) as error:
        load_trace(path)
    assert error.value.where == f"{path}:3"
    assert error.value.field == field


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no such trace file"):
        load_trace(tmp_path / "absent.csv")
