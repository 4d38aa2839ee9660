"""Workloads: public trace readers, trace-fitted synthetic generators and transforms."""

from refimpl.workloads.arrivals import gamma_arrivals, gamma_cv, poisson_arrivals
from refimpl.workloads.synthetic import DEFAULT_WORKLOAD, synthetic, synthetic_names
from refimpl.workloads.workload import DEFAULT_CLASS, Workload, new_workload

__all__ = [
    "DEFAULT_CLASS",
    "DEFAULT_WORKLOAD",
    "Workload",
    "gamma_arrivals",
    "gamma_cv",
    "new_workload",
    "poisson_arrivals",
    "synthetic",
    "synthetic_names",
]
