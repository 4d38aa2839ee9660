"""The seed's SLA-aware scheduler: deadline queues, decode reservation, knapsack batching."""

from refimpl.sched.slo.policy import PythonSLOPolicy, SLOPolicy

__all__ = ["PythonSLOPolicy", "SLOPolicy"]
