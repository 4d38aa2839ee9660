"""`run`: serve a workload on a real Llama-style model executed by refimpl's kernels.

The same loop, policies, gate and records as `simulate`; the difference is the executor
(refimpl.engine.model_executor): each step's plan runs on the model over the pool's own K/V
pages, and the clock advances by the step's measured wall time. The clock jumps over idle
gaps to the next arrival, as the simulated one does: an idle server has nothing to time, so
a run takes about the time its steps take, not the trace's span.

Before serving, this machine's step times for the model are profiled and fitted
(refimpl.engine.step_profile): the policies and the gate plan with that cost model, each step
records its prediction beside the measurement, and `compare_sim` replays the same requests
on the simulated clock with it, so the simulator's error is measured (refimpl.metrics.fidelity),
and again with the model scaled to the machine's speed during the run.
Every attention kernel then makes its first call (refimpl.model.warm_up), so no served step's
measured time includes a compile.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from refimpl.admission import Gate
from refimpl.config._validate import positive_int
from refimpl.costmodel.calibrate import Calibrator
from refimpl.costmodel.profiled import default_table_for
from refimpl.costmodel.step import StepTimeModel
from refimpl.costmodel.table import CostTable
from refimpl.engine.compile_loop import warm_up
from refimpl.engine.engine import Engine, Progress
from refimpl.engine.executor import SimulatedExecutor
from refimpl.engine.model_executor import ModelExecutor, Slowdown, TokenCallback
from refimpl.engine.prompts import prompt_tokens, token_block_hashes
from refimpl.engine.simulate import SimulationResult, gate_for, requests_from_workload
from refimpl.engine.step_profile import BLAS_THREADS, StepProfile, profile_steps
from refimpl.errors import ConfigError
from refimpl.kv.pool import PagePool
from refimpl.kv.prefix import BLOCK_TOKENS
from refimpl.kv.storage import QUANTIZE_FACTOR
from refimpl.metrics.fidelity import fidelity_report, run_speed
from refimpl.model import LlamaConfig, LlamaModel, LlamaWeights
from refimpl.model.warm_up import FIRST_CALLS, warm_up_kernels
from refimpl.sched.policy import Policy, make_policy
from refimpl.sched.request import Request
from refimpl.sched.slo.policy import LADDER
from refimpl.workloads import Workload, make_workload
from refimpl.workloads.transforms import clip_to_context, scale_lengths

__all__ = ["CPU_LENGTH_SCALE", "RunResult", "load_model", "real_pool", "replay_simulated", "run"]

# Prompt and output lengths of a named workload are scaled by this, so a trace's shape serves
# on a CPU in seconds: Azure conversation prompts (about 1,000 tokens) become about 125.
CPU_LENGTH_SCALE = 0.125
DEFAULT_KV_MEMORY_BYTES = 64 * 2**20


@dataclass(frozen=True)
class RunResult(SimulationResult):
    """A real run's records, plus the tokens, each step's prediction, and the comparison."""

    outputs: dict = field(default_factory=dict)  # request id -> generated token ids
    step_log: dict = field(default_factory=dict)  # per step: counts, predicted, measured
    profile: StepProfile | None = None  # the cost model it planned with
    drift: bool = False  # the calibrator's detector fired during the run
    simulated: SimulationResult | None = None  # the same requests on the simulated clock
    fidelity: dict | None = None  # refimpl.metrics.fidelity.fidelity_report


def load_model(model: str | os.PathLike | LlamaConfig | LlamaModel, seed: int = 0
               ) -> LlamaModel:
    """A preset name (seeded random weights), a local Hugging Face checkpoint folder, a
    `LlamaConfig` (random weights) or a ready model."""
    if isinstance(model, LlamaModel):
        return model
    if isinstance(model, LlamaConfig):
        return LlamaModel(LlamaWeights.random(model, seed))
    if isinstance(model, (str, os.PathLike)) and Path(model).is_dir():
        return LlamaModel(LlamaWeights.load(model))
    return LlamaModel(LlamaWeights.random(LlamaConfig.preset(str(model)), seed))


def run(
    workload: Workload | str | Sequence[Request] = "azure-conv-like",
    policy: str | type | Policy = "slo",
    *,
    model: str | os.PathLike | LlamaConfig | LlamaModel = "tiny",
    num_requests: int | None = None,
    rate: float | None = None,
    seed: int = 0,
    length_scale: float | None = None,
    page_size: int = 16,
    kv_memory_bytes: int = DEFAULT_KV_MEMORY_BYTES,
    quantized_format: str = "int8",
    policy_params: dict | None = None,
    admission: bool | Gate | None = None,
    temperature: float = 0.0,
    step_model: StepTimeModel | None = None,
    step_profile: StepProfile | None = None,
    cost_table: CostTable | None = None,
    slowdown: Slowdown | None = None,
    compare_sim: bool = False,
    progress: Progress | None = None,
    profile_progress: Progress | None = None,
    on_token: TokenCallback | None = None,
    prompts: Mapping[int, Sequence[int]] | None = None,
    prefix_cache: bool | None = None,
) -> RunResult:
    """Serve `workload` with `policy` on a real model; deterministic tokens for a given seed
    (times are measured, so they vary a little from run to run).

    Lengths are scaled by `length_scale` (default: `CPU_LENGTH_SCALE` for a named workload,
    1 for a `Workload`) and clipped to the model's context. `step_model` is the cost model
    policies plan with (default: this machine's step profile of the model, measured first,
    or `step_profile`, one measured before by `profile_steps` or an earlier run);
    `cost_table` the kernels' table the policies pick tiles from, and the steps run with
    (default: this machine's saved profile of the model, `refimpl profile`, if any);
    `slowdown` injects drift; `compare_sim` also runs the same requests on the simulated
    clock with that cost model and reports the error. `prompts` gives requests' token ids (by
    request id); the others' are made from their trace block hashes, else seeded
    (refimpl.engine.prompts). `prefix_cache` shares the KV pages of prompt prefixes, keyed on
    each page's worth of tokens: None turns it on where prompts are given or the requests
    carry block hashes (the only ways two prompts can share a prefix), False never, True always.
    """
    positive_int("page_size", page_size)
    if step_profile is not None and step_model is not None:
        raise ConfigError("step_profile", type(step_profile).__name__,
                          "give a step_model or a step_profile, not both")
    if step_profile is not None and not isinstance(step_profile, StepProfile):
        raise ConfigError("step_profile", type(step_profile).__name__,
                          "must be a StepProfile (refimpl.engine.step_profile.profile_steps)")
    with threadpool_limits(limits=BLAS_THREADS, user_api="blas"):
        llama = load_model(model, seed)
        config = llama.config.to_model_config()
        if isinstance(workload, str):
            workload = make_workload(workload, num_requests=num_requests, rate=rate, seed=seed)
            length_scale = CPU_LENGTH_SCALE if length_scale is None else length_scale
        if isinstance(workload, Workload):
            workload = clip_to_context(scale_lengths(workload, length_scale or 1.0), config)
        hash_block_tokens = (workload.hash_block_tokens if isinstance(workload, Workload)
                             else BLOCK_TOKENS)
        requests = (list(workload) if not isinstance(workload, Workload)
                    else requests_from_workload(workload))
        tokens = prompt_tokens(requests, prompts, seed, llama.config.vocab_size,
                               hash_block_tokens)
        cache_prefixes = _prefix_cache_for(prefix_cache, prompts, requests)
        hashes = ({i: token_block_hashes(t, page_size) for i, t in tokens.items()}
                  if cache_prefixes else None)
        profile = step_profile
        if step_model is None:
            if profile is None:
                profile = profile_steps(llama, page_size=page_size, progress=profile_progress)
            step_model = profile.model
        pool = real_pool(config, kv_memory_bytes, page_size)
        if cost_table is None:
            cost_table = default_table_for(config)
        executor = ModelExecutor(llama, step_model, seed=seed, temperature=temperature,
                                 prompts=tokens, calibrator=Calibrator(), slowdown=slowdown,
                                 on_token=on_token, cost_table=cost_table)
        executor.attach(pool.attach_storage(config.num_layers, config.num_kv_heads,
                                            config.head_dim, quantized_format))
        policy = make_policy(policy, **_real_params(policy, policy_params))
        gate = gate_for(admission, policy)
        # the replays' own policies, gates and requests, before the real run binds or fills any
        replays = [(copy.deepcopy(policy), copy.deepcopy(gate), [copy.copy(r) for r in requests])
                   for _ in range(2 if compare_sim else 0)]
        if progress is not None:  # the 8-bit pages' kernel compiles here on a new machine
            progress(0, len(requests), FIRST_CALLS)
        kernels_s = warm_up_kernels(llama, page_size, quantized_format)
        compile_s = warm_up()
        started = time.perf_counter()
        result = Engine(policy, executor, pool, config, gate=gate, cost_table=cost_table,
                        prefix_cache=cache_prefixes, prefix_block_tokens=page_size).run(
            requests, progress, block_hashes=hashes)
        wall_s = time.perf_counter() - started
        settings = {"workload": getattr(workload, "name", "requests"),
                    "num_requests": len(requests), "policy": policy.name, "model": config.name,
                    "clock": "measured", "seed": seed, "page_size": page_size,
                    "kv_pages": pool.num_pages, "step_model": type(step_model).__name__,
                    "admission": gate is not None, "prefix_cache": cache_prefixes,
                    "compile_s": compile_s, "kernels_warm_up_s": kernels_s,
                    "length_scale": length_scale,
                    "step_profile": None if profile is None else profile.summary()}
        log = executor.log.columns()
        real = RunResult(policy.name, result.requests, result.steps, settings, wall_s,
                         outputs=executor.outputs, step_log=log, profile=profile,
                         drift=executor.calibrator.drifted())
        if not compare_sim:
            return real

        def replay(replay_of, clock_scale):
            sim_policy, sim_gate, sim_requests = replay_of
            return replay_simulated(sim_requests, sim_policy, sim_gate, step_model, config,
                                    kv_memory_bytes, page_size, settings, cost_table, hashes,
                                    clock_scale)

        simulated = replay(replays[0], 1.0)
        speed = run_speed(log["offline_s"], log["measured_s"])
        # and on a clock at the machine's speed in the run, the policies planning with the
        # same model as on the real engine (docs/real_engine.md)
        at_speed = replay(replays[1], speed) if speed > 0 else None
        return replace(real, simulated=simulated,
                       fidelity=fidelity_report(real, simulated, at_speed))


def real_pool(config, kv_memory_bytes: int, page_size: int) -> PagePool:
    """A real run's pool: `kv_memory_bytes` of pages, and a CPU tier as large."""
    if isinstance(kv_memory_bytes, bool) or not isinstance(kv_memory_bytes, (int, np.integer)):
        raise ConfigError("kv_memory_bytes", kv_memory_bytes, "must be a whole number of bytes")
    pages = int(kv_memory_bytes) // max(page_size * config.kv_bytes_per_token(), 1)
    return PagePool.for_model(config, kv_memory_bytes, page_size, cpu_tier_pages=pages)


def _prefix_cache_for(prefix_cache: bool | None, prompts, requests: Sequence[Request]
                      ) -> bool:
    """Whether a real run caches prompt prefixes (None: where prompts could share one)."""
    if prefix_cache is not None and not isinstance(prefix_cache, bool):
        raise ConfigError("prefix_cache", prefix_cache, "must be True, False or None")
    if prefix_cache is None:
        return bool(prompts) or any(r.block_hashes for r in requests)
    return prefix_cache


def _real_params(policy, policy_params: dict | None) -> dict:
    """`policy_params`, with `slo`'s ladder packing this engine's float32 pages into 8 bits
    (4x; the ladder's default, 2x, is for 16-bit KV) unless a ladder is given."""
    params = dict(policy_params or {})
    if policy == "slo" and "ladder" not in params:
        params["ladder"] = replace(LADDER, quantize_factor=QUANTIZE_FACTOR)
    return params


def replay_simulated(requests: list[Request], policy: Policy, gate: Gate | None,
                     step_model: StepTimeModel, config, kv_memory_bytes: int, page_size: int,
                     settings: dict, cost_table: CostTable | None = None,
                     block_hashes: Mapping[int, tuple[int, ...]] | None = None,
                     clock_scale: float = 1.0) -> SimulationResult:
    """`requests` with `policy` and `gate` on a real run's pool, on the simulated clock of
    `step_model` times `clock_scale` (with the real run's prefix cache where `block_hashes`
    are given)."""
    pool = real_pool(config, kv_memory_bytes, page_size)
    started = time.perf_counter()
    executor = SimulatedExecutor(step_model, clock_scale=clock_scale)
    run = Engine(policy, executor, pool, config, gate=gate,
                 cost_table=cost_table, prefix_cache=block_hashes is not None,
                 prefix_block_tokens=page_size).run(requests, block_hashes=block_hashes)
    return SimulationResult(policy.name, run.requests, run.steps,
                            {**settings, "clock": "simulated"}, time.perf_counter() - started)
