"""Token-length distributions fitted to the public Azure LLM inference 2023 traces.

Each distribution is a quantile table: token counts at fixed probabilities, sampled by inverse
transform with interpolation in log space, then rounded and clipped to the trace's observed
min/max (the table's end points). A log-normal fits these traces badly: the conversation
prompts cluster at a few sizes and the code outputs have a long tail, so a log-normal fitted to
log lengths misses the p50 by up to 25% and the p95 by up to 40%. The table reproduces p50 and
p95 within 1% and the mean within 2% (tests/workloads/test_real_traces.py checks the constants
against the real files when present, test_synthetic.py the samples).

Prompt and output lengths are sampled independently: their Spearman rank correlation is 0.07
(conv) and -0.02 (code) in the traces.

Source: Azure/AzurePublicDataset, data/AzureLLMInferenceTrace_{conv,code}.csv (CC BY 4.0;
Patel et al., "Splitwise", ISCA 2024), commit 790921015d50dd6aae7f7e47f39ba0e235ad6b08.
Fitted with `fit_quantile_table` over every row; to refit (prints the tables below):
`python -c "import sys; from refimpl.workloads import fit_length_distribution as f, load_trace;
print(f(load_trace(sys.argv[1])))" ../shared/traces/AzureLLMInferenceTrace_conv.csv` (and
`..._code.csv`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refimpl.workloads.workload import Workload

__all__ = [
    "AZURE_CODE_LENGTHS",
    "AZURE_CONV_LENGTHS",
    "QUANTILE_PROBS",
    "LengthDistribution",
    "QuantileTable",
    "fit_length_distribution",
    "fit_quantile_table",
]

# Probabilities of the table's knots: every 5%, denser in both tails, where the traces' long
# tails and short minimums sit. (27,)
QUANTILE_PROBS = np.array(
    [0.0, 0.01, 0.025, *np.round(np.arange(0.05, 0.951, 0.05), 2), 0.975, 0.99, 0.995, 0.999, 1.0]
)


@dataclass(frozen=True)
class QuantileTable:
    """A length distribution: token counts at `QUANTILE_PROBS` (first = min, last = max)."""

    tokens: tuple[float, ...]  # (27,) non-decreasing, >= 1

    def sample(self, num_samples: int, rng: np.random.Generator) -> np.ndarray:
        """`num_samples` lengths, int64 (num_samples,), by inverse transform in log space."""
        log_tokens = np.log(np.asarray(self.tokens))  # (27,)
        u = rng.random(num_samples)  # (num_samples,) uniform in [0, 1)
        lengths = np.rint(np.exp(np.interp(u, QUANTILE_PROBS, log_tokens)))
        return np.clip(lengths, self.tokens[0], self.tokens[-1]).astype(np.int64)


@dataclass(frozen=True)
class LengthDistribution:
    """Prompt and output lengths of one trace, sampled independently."""

    prompt: QuantileTable
    output: QuantileTable


def fit_quantile_table(tokens: np.ndarray) -> QuantileTable:
    """The quantile table of observed lengths (linear-interpolated percentiles, as numpy's)."""
    knots = np.percentile(np.asarray(tokens, dtype=np.float64), QUANTILE_PROBS * 100)
    return QuantileTable(tokens=tuple(round(float(k), 1) for k in knots))


def fit_length_distribution(workload: Workload) -> LengthDistribution:
    """Prompt and output tables fitted to `workload` (e.g. a trace `load_trace` read)."""
    return LengthDistribution(
        prompt=fit_quantile_table(workload.prompt_tokens),
        output=fit_quantile_table(workload.output_tokens),
    )


# Fitted from AzureLLMInferenceTrace_conv.csv (19,366 rows). Trace: prompt mean / p50 / p95 =
# 1,154.7 / 1,020 / 4,083, output 211.1 / 129 / 451.
# fmt: off
AZURE_CONV_LENGTHS = LengthDistribution(
    prompt=QuantileTable(tokens=(
        2.0, 29.0, 120.0, 181.0, 207.0, 372.0, 387.0, 396.0, 403.0, 414.0, 703.0, 984.0, 1020.0,
        1045.0, 1071.0, 1097.0, 1130.0, 1189.0, 1315.0, 1876.2, 2734.5, 4083.0, 4092.0, 4142.0,
        4831.0, 6179.2, 14050.0
    )),
    output=QuantileTable(tokens=(
        7.0, 16.0, 28.0, 41.0, 54.0, 67.0, 77.0, 85.0, 91.0, 96.0, 103.0, 113.0, 129.0, 151.0,
        177.0, 217.0, 384.0, 395.0, 400.0, 411.0, 424.0, 451.0, 522.0, 601.0, 643.2, 954.0, 1000.0
    )),
)
# fmt: on

# Fitted from AzureLLMInferenceTrace_code.csv (8,819 rows). Trace: prompt mean / p50 / p95 =
# 2,047.8 / 1,469 / 7,303, output 27.9 / 13 / 90.
# fmt: off
AZURE_CODE_LENGTHS = LengthDistribution(
    prompt=QuantileTable(tokens=(
        3.0, 17.0, 44.0, 75.0, 147.0, 232.0, 385.6, 578.0, 770.0, 938.6, 1075.0, 1261.1, 1469.0,
        1690.0, 1909.0, 2163.7, 2433.0, 2744.5, 3192.4, 3920.2, 5187.6, 7303.3, 7435.0, 7436.0,
        7436.0, 7437.0, 7437.0
    )),
    output=QuantileTable(tokens=(
        6.0, 6.0, 6.0, 6.0, 7.0, 7.0, 8.0, 9.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 16.0, 18.0,
        20.0, 24.0, 29.0, 39.0, 55.0, 90.0, 145.0, 251.5, 359.4, 825.3, 1899.0
    )),
)
# fmt: on
