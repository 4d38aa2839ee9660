"""Scheduling: requests, the run's request table, step plans, the policy protocol, policies."""

from refimpl.sched.plan import StepPlan
from refimpl.sched.policy import BASELINES, POLICIES, Policy, PolicyContext, make_policy
from refimpl.sched.request import Request, RequestStatus

__all__ = ["BASELINES", "POLICIES", "Policy", "PolicyContext", "Request", "RequestStatus",
           "StepPlan", "make_policy"]
