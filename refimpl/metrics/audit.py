"""How right an admission gate was: its two errors, measured by replaying without it.

A gate errs in two ways (issue 14):
- a **false reject**: it rejected a request that would have met both SLOs had it been served.
  Measured in simulation by serving the same requests with the same policy and no gate: a
  request the gate rejected (for a gate reason, not because it could never fit) that met both
  SLOs in that replay. The replay serves everything, so a rejection that saved others is
  counted too when the rejected request itself would have made it: an upper bound, and the
  error the gate's users feel;
- a **late admit**: it admitted a request (accepted or degraded) that then missed an SLO.
Both are given as counts and as shares of all arrivals.
"""

from __future__ import annotations

import numpy as np

from refimpl.metrics.latency import request_latencies
from refimpl.metrics.records import REJECTED, RequestRecords

__all__ = ["NEVER_FIT", "audit_admission"]

# Rejections the loop makes before any gate is asked: no gate could have served these.
NEVER_FIT = ("exceeds_context", "exceeds_kv_capacity")


def audit_admission(gated: RequestRecords, ungated: RequestRecords) -> dict:
    """The gate's false rejects and late admits in `gated`, against `ungated` (the same
    requests served by the same policy without the gate)."""
    if not np.array_equal(np.sort(gated.request_id), np.sort(ungated.request_id)):
        raise ValueError("the two runs must serve the same requests")
    met_ungated = dict(zip(ungated.request_id.tolist(),
                           request_latencies(ungated).meets_slo.tolist(), strict=True))
    latencies = request_latencies(gated)
    rejected = (gated.status == REJECTED) & ~np.isin(gated.reason, NEVER_FIT)
    would_meet = np.array([met_ungated[r] for r in gated.request_id.tolist()], dtype=bool)
    false_rejects = int((rejected & would_meet).sum())
    late_admits = int((latencies.is_finished & ~latencies.meets_slo).sum())
    n = max(len(gated), 1)
    return {"false_rejects": false_rejects, "false_reject_share": false_rejects / n,
            "late_admits": late_admits, "late_admit_share": late_admits / n,
            "gate_rejects": int(rejected.sum())}
