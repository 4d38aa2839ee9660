"""A sweep's grid: workload x SLO set x policy (x its parameters) x rate x seed, as cells.

The grid is data (a frozen dataclass), read from flags or from a small TOML file (stdlib
`tomllib`; no YAML dependency), checked before anything runs, and expanded into `Cell`s in one
fixed order, so the same grid always gives the same cells in the same order. A TOML grid:

    workload = ["azure-conv-like"]        # synthetic names or trace paths
    policy = ["slo", "vllm"]              # or "all"
    rate = [5.0, 10.0, 20.0]              # requests/s (omit: each workload's own rate)
    slo = ["default"]                     # SLO presets, named sets or NAME:SHARE,... specs
    seed = [0, 1]
    num_requests = 500
    model = "llama-3-8b"
    hardware = "h100-sxm"
    [policy_params]                       # per policy, a list of parameter sets (one cell each)
    vllm = [{token_budget = 2048}, {token_budget = 8192}]
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, fields
from numbers import Real
from pathlib import Path

from refimpl.config import MODEL_PRESETS, SLO_PRESETS, SLO_SETS, one_class, preset_names
from refimpl.config import slo_set as parse_slo_set
from refimpl.config._validate import check_seed, positive_int
from refimpl.config.slo_sets import SLOSet
from refimpl.costmodel.choose import STEP_MODELS
from refimpl.errors import ConfigError
from refimpl.sched.policy import POLICIES, make_policy
from refimpl.sweeps.cell import Cell
from refimpl.workloads import SYNTHETIC

__all__ = ["SweepGrid", "load_grid", "slo_set_named"]


def slo_set_named(text: str) -> SLOSet:
    """An SLO preset name (one class for every request), a named set, or a `NAME:SHARE,...`."""
    if not isinstance(text, str):
        raise ConfigError("slo", text, "must be a name or a NAME:SHARE,... text")
    if ":" not in text and text not in SLO_PRESETS and text not in SLO_SETS:
        raise ConfigError("slo", text, "unknown SLO preset or set",
                          choices=(*SLO_PRESETS, *SLO_SETS))
    return one_class(text) if text in SLO_PRESETS else parse_slo_set(text)


@dataclass(frozen=True)
class SweepGrid:
    """The axes of a sweep and the settings every cell shares; checked on creation."""

    workloads: tuple[str, ...] = ("azure-conv-like",)  # synthetic names or trace paths
    policies: tuple[str, ...] = ("slo",)
    rates: tuple[float | None, ...] = (None,)  # requests/s; None: the workload's own rate
    slos: tuple[str, ...] = ("default",)  # presets, named sets or NAME:SHARE,... specs
    seeds: tuple[int, ...] = (0,)
    policy_params: dict = field(default_factory=dict)  # policy -> list of parameter dicts
    num_requests: int | None = 500  # per cell; None: the whole workload
    model: str = "llama-3-8b"
    hardware: str = "h100-sxm"
    step_model: str = "auto"
    admission: bool | None = None  # None: simulate's default (on for slo only)

    def __post_init__(self) -> None:
        for name in ("workloads", "policies", "rates", "slos", "seeds"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise ConfigError(name, value, "must be a list")
            if not value:
                raise ConfigError(name, value, "must list at least one value")
            object.__setattr__(self, name, tuple(value))
        if "all" in self.policies:
            object.__setattr__(self, "policies", POLICIES)
        self._check()

    def _check(self) -> None:
        """Every value valid, so a bad grid fails before its first cell runs."""
        for workload in self.workloads:
            if workload not in SYNTHETIC and not Path(workload).is_file():
                raise ConfigError("workload", workload, "neither a synthetic workload nor a "
                                  "trace file", choices=SYNTHETIC)
        for policy in self.policies:
            if policy not in POLICIES:
                raise ConfigError("policy", policy, "unknown policy", choices=POLICIES)
        for rate in self.rates:
            if rate is not None and (isinstance(rate, bool) or not isinstance(rate, Real)
                                     or not math.isfinite(rate) or rate <= 0):
                raise ConfigError("rate", rate, "must be a finite number of requests/s above 0")
        for slo in self.slos:
            slo_set_named(slo)
        for seed in self.seeds:
            check_seed(seed)
        if self.num_requests is not None:
            positive_int("num_requests", self.num_requests)
        if self.model not in MODEL_PRESETS:
            raise ConfigError("model", self.model, "unknown model preset", choices=MODEL_PRESETS)
        if self.hardware not in preset_names():
            raise ConfigError("hardware", self.hardware, "unknown hardware preset",
                              choices=preset_names())
        if self.step_model not in STEP_MODELS:
            raise ConfigError("step_model", self.step_model, "unknown step model",
                              choices=STEP_MODELS)
        if self.admission is not None and not isinstance(self.admission, bool):
            raise ConfigError("admission", self.admission, "must be true, false or absent")
        self._check_policy_params()

    def _check_policy_params(self) -> None:
        if not isinstance(self.policy_params, dict):
            raise ConfigError("policy_params", self.policy_params, "must map a policy to a list "
                              "of parameter tables")
        for policy, sets in self.policy_params.items():
            if policy not in self.policies:
                raise ConfigError("policy_params", policy, "is not a policy of this sweep",
                                  choices=self.policies)
            if not isinstance(sets, (list, tuple)) or not sets or not all(
                    isinstance(params, dict) for params in sets):
                raise ConfigError(f"policy_params.{policy}", sets, "must be a non-empty list "
                                  "of parameter tables")
            for params in sets:
                make_policy(policy, **params)  # an unknown or bad parameter fails here

    def cells(self) -> list[Cell]:
        """Every cell, in the grid's one order: workload, SLO set, policy, its parameters,
        rate, seed (the last varies fastest)."""
        return [
            Cell(workload=workload, policy=policy, rate=None if rate is None else float(rate),
                 slo=slo, seed=int(seed), policy_params=dict(params),
                 num_requests=self.num_requests, model=self.model, hardware=self.hardware,
                 step_model=self.step_model, admission=self.admission)
            for workload in self.workloads
            for slo in self.slos
            for policy in self.policies
            for params in self.policy_params.get(policy, ({},))
            for rate in self.rates
            for seed in self.seeds
        ]


# TOML keys (singular, as a person writes them) -> SweepGrid fields.
_TOML_AXES = {"workload": "workloads", "policy": "policies", "rate": "rates", "slo": "slos",
              "classes": "slos", "seed": "seeds"}
_TOML_SCALARS = {"num_requests", "model", "hardware", "step_model", "admission",
                 "policy_params"}


def load_grid(path: str | Path, **overrides: object) -> SweepGrid:
    """The grid a TOML file describes (axes may be single values or lists; `slo` and `classes`
    both add SLO sets); `overrides` (SweepGrid fields) replace what the file says."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError("grid", str(path), f"cannot be read ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError("grid", str(path), f"is not valid TOML ({error})") from None
    known = set(_TOML_AXES) | _TOML_SCALARS
    values: dict = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(key, value, "unknown grid field", choices=sorted(known),
                              where=str(path))
        if key in _TOML_AXES:
            items = list(value) if isinstance(value, list) else [value]
            values.setdefault(_TOML_AXES[key], []).extend(items)
        else:
            values[key] = value
    values.update({k: v for k, v in overrides.items() if v is not None})
    names = {f.name for f in fields(SweepGrid)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError("override", unknown[0], "not a grid field", choices=sorted(names))
    try:
        return SweepGrid(**values)
    except ConfigError as error:
        raise type(error)(error.field, error.value, error.problem, choices=error.choices,
                          where=str(path)) from None
