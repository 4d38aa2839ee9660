"""`simulate`: replay a workload through a policy on the simulated clock, in one call.

The researcher's entry point: a workload (synthetic name, trace path or `Workload`), a policy
(name, class or instance), a model and hardware preset; back come per-request and per-step
records and their summary. The KV pool gets the memory left after the weights, at vLLM's
default `gpu_memory_utilization` of 0.9 of every tensor-parallel GPU (weights split over
them), in pages of 16 tokens. The clock is `step_model`: a model, or a name
(refimpl.costmodel.choose: `auto`, the calibrated model on the GPU presets; `roofline`).
Admission control (refimpl.admission) is on by default for `slo` and off for the baselines;
any can have it. Prefix caching (refimpl.kv.prefix) is on wherever the requests carry block
hashes (the Mooncake traces), as in every production engine; `prefix_cache=False` turns it off.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from refimpl.admission import AdmissionController, Gate
from refimpl.config import SLO, HardwareSpec, ModelConfig, dtype_bytes
from refimpl.config._validate import check_seed
from refimpl.costmodel.choose import step_time_model
from refimpl.costmodel.step import StepTimeModel
from refimpl.engine.compile_loop import warm_up
from refimpl.engine.engine import Engine, Progress
from refimpl.engine.executor import SimulatedExecutor
from refimpl.errors import CapacityError, ConfigError
from refimpl.kv._checks import check_count
from refimpl.kv.pool import PagePool
from refimpl.kv.prefix import BLOCK_TOKENS
from refimpl.metrics.audit import audit_admission
from refimpl.metrics.records import RequestRecords, StepRecords
from refimpl.sched.policy import Policy, make_policy
from refimpl.sched.request import Request
from refimpl.workloads import Workload, make_workload

__all__ = [
    "SimulationResult",
    "cost_table_for",
    "gate_for",
    "kv_pool_for",
    "prefix_cache_for",
    "requests_from_workload",
    "simulate",
]

MEMORY_UTILIZATION = 0.9  # vLLM's default share of device memory it plans to use
PAGE_SIZE = 16  # tokens per KV page (vLLM's default block size)


@dataclass(frozen=True)
class SimulationResult:
    """Records of one simulated run, with what produced them."""

    policy: str
    requests: RequestRecords
    steps: StepRecords
    settings: dict = field(default_factory=dict)
    wall_s: float = 0.0  # real seconds the simulation took (compiling the loop not counted)
    audit: dict | None = None  # the gate's errors (refimpl.metrics.audit), where asked for

    def summary(self) -> dict:
        """The run's metrics (see `refimpl.metrics.summarize`), and the gate's audit."""
        from refimpl.metrics.summary import summarize

        return {**summarize(self.requests, self.steps), **(self.audit or {})}


def kv_pool_for(model: ModelConfig, hardware: HardwareSpec, page_size: int = PAGE_SIZE,
                memory_utilization: float = MEMORY_UTILIZATION,
                kv_pages: int | None = None) -> PagePool:
    """A page pool filling the device memory the weights leave free, with a CPU tier as
    large; `kv_pages` pages instead where given (vLLM's `num_gpu_blocks_override`)."""
    page_size = check_count("page_size", page_size, 1)
    if kv_pages is not None:
        kv_pages = check_count("kv_pages", kv_pages, 1)
        return PagePool(kv_pages, page_size, max_context=model.max_context,
                        cpu_tier_pages=kv_pages)
    weight_bytes = model.num_parameters() * dtype_bytes(model.weight_dtype, "weight_dtype")
    budget = int(hardware.memory_bytes * hardware.num_gpus * memory_utilization) - weight_bytes
    if budget <= 0:
        raise CapacityError("model", model.name, f"its {weight_bytes / 2**30:.1f} GiB of "
                            f"weights leave no KV memory on {hardware.name}")
    # The CPU tier KV pages spill to: as large as the device pool (hosts carry at least as
    # much memory as their accelerators).
    num_pages = budget // (page_size * model.kv_bytes_per_token())
    return PagePool.for_model(model, budget, page_size, cpu_tier_pages=max(num_pages, 0))


@functools.lru_cache(maxsize=8)
def cost_table_for(model: ModelConfig, hardware: HardwareSpec):
    """The kernels' cost table the policies may pick tiles from: analytic (roofline) for
    spec-sheet hardware, this machine's saved profile otherwise (None if never profiled)."""
    if hardware.analytic:
        from refimpl.costmodel.roofline import roofline_table

        return roofline_table(model, hardware)
    from refimpl.costmodel.profiled import default_table_for

    return default_table_for(model)


def gate_for(admission: bool | Gate | None, policy: Policy) -> Gate | None:
    """The run's gate: True a default `AdmissionController`, False none, a `Gate` itself,
    None on for `slo` only."""
    if not (admission is None or isinstance(admission, (bool, Gate))):
        raise ConfigError("admission", admission, "must be True, False, None or a refimpl Gate")
    if admission is None:
        admission = policy.name == "slo"
    if isinstance(admission, bool):
        return AdmissionController() if admission else None
    return admission


def prefix_cache_for(prefix_cache: bool | None, requests: Sequence[Request]) -> bool:
    """Whether a run caches prompt prefixes: None means where some request has block hashes."""
    if prefix_cache is not None and not isinstance(prefix_cache, bool):
        raise ConfigError("prefix_cache", prefix_cache, "must be True, False or None")
    has_hashes = any(getattr(r, "block_hashes", ()) for r in requests)  # (checked later)
    return has_hashes if prefix_cache is None else prefix_cache and has_hashes


def requests_from_workload(workload: Workload) -> list[Request]:
    """One `Request` per workload row, ids in arrival order from 0."""
    slos: dict[tuple[float, float], SLO] = {}
    requests = []
    hashes = workload.hash_ids or ((),) * len(workload)
    for i in range(len(workload)):
        key = (float(workload.ttft_slo_s[i]), float(workload.tpot_slo_s[i]))
        slo = slos.get(key) or slos.setdefault(key, SLO(*key))
        requests.append(Request(
            request_id=i, arrival_s=float(workload.arrival_s[i]),
            prompt_tokens=int(workload.prompt_tokens[i]),
            max_new_tokens=int(workload.output_tokens[i]), priority=int(workload.priority[i]),
            slo=slo, slo_class=str(workload.slo_class[i]), block_hashes=tuple(hashes[i]),
        ))
    return requests


def simulate(
    workload: Workload | str | Sequence[Request] = "azure-conv-like",
    policy: str | type | Policy = "slo",
    *,
    model: str | ModelConfig = "llama-3-8b",
    hardware: str | HardwareSpec = "h100-sxm",
    num_requests: int | None = None,
    rate: float | None = None,
    seed: int = 0,
    step_model: StepTimeModel | str = "auto",
    page_size: int = PAGE_SIZE,
    policy_params: dict | None = None,
    progress: Progress | None = None,
    admission: bool | Gate | None = None,
    audit: bool = False,
    prefix_cache: bool | None = None,
    kv_pages: int | None = None,
) -> SimulationResult:
    """Serve `workload` with `policy` on a simulated clock; deterministic for a given seed.

    `admission` is True (a default `AdmissionController`), False, a gate of your own, or
    None: on for `slo`, off otherwise. `workload` may also be a list of hand-made `Request`s,
    which the run then fills in (their times and counts). Each is checked on entry (a field no
    run could serve raises `ConfigError` naming the request, the field and the value) and
    copied into the run's table: the run reads only what a request asks for, never what an
    earlier run wrote into it, so the same list may be served again and gives the same run
    (each run's results overwrite the last in the objects; the records returned are copies).
    `prefix_cache` None caches prompt prefixes where the requests carry block hashes
    (`Request.block_hashes`; Mooncake traces' `hash_ids`), False never, True wherever they do.
    `kv_pages` sizes the KV pool (and its CPU tier) in pages instead of from the memory the
    weights leave (`kv_pool_for`). With `audit`, a run with a gate
    is replayed without it, and the gate's false rejects and late admits are reported
    (refimpl.metrics.audit; the replay's time is not in `wall_s`).
    """
    check_seed(seed)  # (also where the workload is given, so settings record a valid one)
    model = model if isinstance(model, ModelConfig) else ModelConfig.preset(model)
    hardware = hardware if isinstance(hardware, HardwareSpec) else HardwareSpec.preset(hardware)
    if isinstance(workload, str):
        workload = make_workload(workload, num_requests=num_requests, rate=rate, seed=seed)
    policy = make_policy(policy, **(policy_params or {}))
    unbound = copy.deepcopy(policy) if audit else None  # the replay's, before any run binds it
    if isinstance(step_model, str):
        step_model = step_time_model(model, hardware, kind=step_model)
    pool = kv_pool_for(model, hardware, page_size, kv_pages=kv_pages)
    executor = SimulatedExecutor(step_model)
    admission = gate_for(admission, policy)
    requests = (list(workload) if not isinstance(workload, Workload)
                else requests_from_workload(workload))
    prefix_cache = prefix_cache_for(prefix_cache, requests)
    block_tokens = (workload.hash_block_tokens if isinstance(workload, Workload)
                    else BLOCK_TOKENS)  # (a scaled trace's hash blocks are scaled too)
    runner = Engine(policy, executor, pool, model, hardware=hardware,
                    cost_table=cost_table_for(model, hardware), gate=admission,
                    prefix_cache=prefix_cache, prefix_block_tokens=block_tokens)
    compile_s = warm_up()  # timed apart: `wall_s` is the simulation alone
    started = time.perf_counter()
    run = runner.run(requests, progress)
    settings = {
        "workload": getattr(workload, "name", "requests"), "num_requests": len(requests),
        "policy": policy.name,
        "model": model.name, "hardware": hardware.name, "seed": seed, "page_size": page_size,
        "kv_pages": pool.num_pages, "step_model": type(step_model).__name__,
        "admission": admission is not None, "prefix_cache": prefix_cache,
        "compile_s": compile_s,
    }
    wall_s = time.perf_counter() - started
    report = None
    if audit and admission is not None:
        replay_pool = kv_pool_for(model, hardware, page_size, kv_pages=kv_pages)
        replay = Engine(unbound, executor, replay_pool, model,
                        hardware=hardware, cost_table=runner.cost_table,
                        prefix_cache=prefix_cache, prefix_block_tokens=block_tokens).run(
            [copy.copy(r) for r in requests])  # the caller's requests keep the gated run
        report = audit_admission(run.requests, replay.requests)
    return SimulationResult(policy.name, run.requests, run.steps, settings, wall_s, report)
