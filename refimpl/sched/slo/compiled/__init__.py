"""The `slo` policy's whole tick compiled (see `state` for the layout): one file a part.

`state` (parameters, counters, the arrays), `queues` (the prefill heap, the decode set),
`projection` (the KV cache as the tick's plan leaves it), `pressure` (preemption, restores,
the ladder), `tick` (`plan_slo`, its decode and prefill choices, and the hooks).
"""

from refimpl.sched.slo.compiled.state import SLOState, new_slo_state, no_slo_state
from refimpl.sched.slo.compiled.tick import plan_slo, slo_add, slo_update

__all__ = ["SLOState", "new_slo_state", "no_slo_state", "plan_slo", "slo_add", "slo_update"]
