"""Scheduling: requests, step plans, the policy protocol and the baseline policies."""

from refimpl.sched.plan import StepPlan
from refimpl.sched.policy import BASELINES, POLICIES, Policy, QueuePolicy, make_policy
from refimpl.sched.request import Request, RequestStatus

__all__ = ["BASELINES", "POLICIES", "Policy", "QueuePolicy", "Request", "RequestStatus", "StepPlan",
           "make_policy"]
