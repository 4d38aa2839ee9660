"""Workloads: public trace readers, trace-fitted synthetic generators and transforms."""

from refimpl.workloads.arrivals import gamma_arrivals, gamma_cv, poisson_arrivals
from refimpl.workloads.lengths import fit_length_distribution
from refimpl.workloads.load import TRACE_FORMATS, detect_format, load_trace, make_workload
from refimpl.workloads.synthetic import (
    DEFAULT_NUM_REQUESTS,
    DEFAULT_WORKLOAD,
    SYNTHETIC,
    synthetic,
    synthetic_names,
)
from refimpl.workloads.transforms import (
    assign_classes,
    assign_slo_set,
    clip_to_context,
    head,
    scale_lengths,
    scale_to_rate,
    window,
)
from refimpl.workloads.workload import DEFAULT_CLASS, Workload, new_workload

__all__ = [
    "DEFAULT_CLASS",
    "DEFAULT_NUM_REQUESTS",
    "DEFAULT_WORKLOAD",
    "SYNTHETIC",
    "TRACE_FORMATS",
    "Workload",
    "assign_classes",
    "assign_slo_set",
    "clip_to_context",
    "detect_format",
    "fit_length_distribution",
    "gamma_arrivals",
    "gamma_cv",
    "head",
    "load_trace",
    "make_workload",
    "new_workload",
    "poisson_arrivals",
    "scale_lengths",
    "scale_to_rate",
    "synthetic",
    "synthetic_names",
    "window",
]
