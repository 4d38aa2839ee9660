"""The public traces in ../shared/traces: row counts and the README's statistics, reproduced.

Skipped when the traces are absent (the `traces_dir` fixture). Figures are those of
/work/shared/traces/README.md, computed there over every row.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from refimpl.workloads import fit_length_distribution, load_trace
from refimpl.workloads.lengths import AZURE_CODE_LENGTHS, AZURE_CONV_LENGTHS

CONV = "AzureLLMInferenceTrace_conv.csv"
CODE = "AzureLLMInferenceTrace_code.csv"
MOONCAKE = "mooncake_synthetic_trace.jsonl"
SHAREGPT = "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"

# file -> rows, mean rate (req/s, None: no arrivals), prompt mean / p50, output mean / p50.
README = {
    CONV: (19_366, 5.53, 1_154.7, 1_020, 211.1, 129),
    CODE: (8_819, 2.57, 2_047.8, 1_469, 27.9, 13),
    MOONCAKE: (3_993, 3.91, 15_325.5, 11_587, 149.1, 69),
    SHAREGPT: (30_731, None, 2_340.0, 1_730, 438.7, 415),
}


@pytest.mark.parametrize("name", list(README))
def test_each_trace_has_the_readme_rows_rate_and_lengths(traces_dir, name):
    rows, rate, prompt_mean, prompt_p50, output_mean, output_p50 = README[name]
    workload = load_trace(traces_dir / name, rate=1.0 if rate is None else None)
    assert len(workload) == rows
    if rate is not None:
        assert workload.mean_rate == pytest.approx(rate, abs=0.005)
    assert workload.prompt_tokens.mean() == pytest.approx(prompt_mean, abs=0.05)
    assert np.percentile(workload.prompt_tokens, 50) == prompt_p50
    assert workload.output_tokens.mean() == pytest.approx(output_mean, abs=0.05)
    assert np.percentile(workload.output_tokens, 50) == output_p50


def test_azure_conv_span_matches_the_first_and_last_timestamps(traces_dir):
    # 18:15:46.6805900 -> 19:14:08.4025270: 3,501.7219370 s, exact to the 100 ns tick.
    workload = load_trace(traces_dir / CONV)
    assert workload.duration_s == pytest.approx(3_501.721937, abs=1e-9)


def test_mooncake_hash_ids_cover_each_prompt_in_512_token_blocks(traces_dir):
    workload = load_trace(traces_dir / MOONCAKE)
    num_blocks = np.array([len(ids) for ids in workload.hash_ids])  # (n,)
    np.testing.assert_array_equal(num_blocks, -(-workload.prompt_tokens // 512))
    assert num_blocks.sum() == 121_877


def test_the_conv_trace_loads_in_under_a_second(traces_dir):
    # ~0.1 s on an idle laptop core; the bound leaves room for a busy 2-core CI machine.
    load_trace(traces_dir / CONV)  # warm the file cache and imports
    start = time.perf_counter()
    load_trace(traces_dir / CONV)
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    ("name", "fitted"), [(CONV, AZURE_CONV_LENGTHS), (CODE, AZURE_CODE_LENGTHS)]
)
def test_the_fitted_length_constants_are_the_fit_of_the_real_trace(traces_dir, name, fitted):
    assert fit_length_distribution(load_trace(traces_dir / name)) == fitted
