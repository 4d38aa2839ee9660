"""The saved cost table: per (phase, B, T) grid point every candidate's costs and the pick.

This is what the online scheduler consults every tick (seed sections 1 and 6). A look-up finds
the grid cell by bisection, O(log R) in the grid size, and interpolates the fastest time
bilinearly in (log B, log T, log time), so a power law between grid points is exact and the
grid points themselves come back bit for bit. Outside the grid it raises `CapacityError`, or
with `clamp=True` answers for the nearest edge (then the time is a lower bound past the top).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from refimpl._version import __version__
from refimpl.costmodel.candidates import AttentionDims, Candidate
from refimpl.costmodel.gemm import GemmProfile
from refimpl.costmodel.pareto import fastest, pareto_mask
from refimpl.errors import CapacityError, ConfigError

__all__ = [
    "FORMAT_VERSION",
    "CandidateInfo",
    "CostTable",
    "ForeignTableWarning",
    "PhaseTable",
    "build_phase",
    "default_table_path",
    "load_table",
]

FORMAT_VERSION = 1  # bump when the JSON layout changes; other versions are refused on load


class ForeignTableWarning(UserWarning):
    """A table measured on another machine or by another refimpl version is being used."""


@dataclass(frozen=True)
class CandidateInfo:
    """What a table keeps of a candidate: its name, tile parameters and SRAM need."""

    name: str
    params: dict[str, int]
    sram_bytes: int


Grid3 = tuple[tuple[tuple[float, ...], ...], ...]  # [candidate][B index][T index]


def _log_weight(grid_log: tuple[float, ...], x_log: float) -> tuple[int, int, float]:
    """(lower index, upper index, weight of the upper) bracketing x_log, inside the grid."""
    i = bisect_right(grid_log, x_log) - 1
    if i >= len(grid_log) - 1:
        return i, i, 0.0
    return i, i + 1, (x_log - grid_log[i]) / (grid_log[i + 1] - grid_log[i])


def _geo(a: float, b: float, w: float) -> float:
    """Geometric interpolation a^(1-w) b^w, exactly a at w = 0."""
    return a if w == 0.0 else a * (b / a) ** w


@dataclass(frozen=True)
class PhaseTable:
    """One phase's grid, every candidate's predicted time, bytes and FLOPs, and the picks."""

    phase: str
    batches: tuple[int, ...]  # B grid, increasing, >= 1
    seq_lens: tuple[int, ...]  # T grid, increasing, >= 1
    candidates: tuple[CandidateInfo, ...]
    time_s: Grid3
    hbm_bytes: Grid3
    flops: Grid3
    best: tuple[tuple[int, ...], ...]  # [B index][T index] -> fastest candidate within budget
    best_time_s: tuple[tuple[float, ...], ...]
    _log_b: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _log_t: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_log_b", tuple(math.log(b) for b in self.batches))
        object.__setattr__(self, "_log_t", tuple(math.log(t) for t in self.seq_lens))

    def _cell(self, batch: float, seq_len: float, clamp: bool):
        """Bracketing indices and weights of (B, T); clamped or refused outside the grid."""
        lo_b, hi_b = self.batches[0], self.batches[-1]
        lo_t, hi_t = self.seq_lens[0], self.seq_lens[-1]
        if not (lo_b <= batch <= hi_b and lo_t <= seq_len <= hi_t):
            if not clamp:
                field_name, value = ("B", batch) if not lo_b <= batch <= hi_b else ("T", seq_len)
                raise CapacityError(field_name, value, f"outside the {self.phase} table "
                                    f"(B in [{lo_b}, {hi_b}], T in [{lo_t}, {hi_t}]); "
                                    "pass clamp=True to use the nearest edge")
            batch = min(max(batch, lo_b), hi_b)
            seq_len = min(max(seq_len, lo_t), hi_t)
        return _log_weight(self._log_b, math.log(batch)), _log_weight(self._log_t,
                                                                       math.log(seq_len))

    def predict_s(self, batch: float, seq_len: float, clamp: bool = False) -> float:
        """Interpolated time of the fastest candidate at (B, T)."""
        return self.lookup(batch, seq_len, clamp)[1]

    def lookup(self, batch: float, seq_len: float, clamp: bool = False) -> tuple[str, float]:
        """(name of the pick at the nearest grid point in log space, interpolated time)."""
        (i0, i1, u), (j0, j1, v) = self._cell(batch, seq_len, clamp)
        t = self.best_time_s
        time_s = _geo(_geo(t[i0][j0], t[i0][j1], v), _geo(t[i1][j0], t[i1][j1], v), u)
        pick = self.best[i1 if u > 0.5 else i0][j1 if v > 0.5 else j0]
        return self.candidates[pick].name, time_s

    def on_frontier(self, budget_bytes: int) -> list[list[list[bool]]]:
        """[B index][T index][candidate] -> on the Pareto frontier under `budget_bytes`."""
        sram = [c.sram_bytes for c in self.candidates]
        return [[pareto_mask([ts[i][j] for ts in self.time_s], [hs[i][j] for hs in
                                                                 self.hbm_bytes], sram,
                             budget_bytes) for j in range(len(self.seq_lens))]
                for i in range(len(self.batches))]


def build_phase(phase: str, candidates: Sequence[Candidate], dims: AttentionDims,
                batches: Sequence[int], seq_lens: Sequence[int],
                time_fn: Callable[[Candidate, int, int], float],
                budget_bytes: int) -> PhaseTable:
    """Evaluate `time_fn` and the analytic costs of every candidate on the grid; pick per point."""
    batches, seq_lens = tuple(sorted(batches)), tuple(sorted(seq_lens))
    time_s, hbm, flops = [], [], []
    for cand in candidates:
        costs = [[cand.costs(dims, b, t) for t in seq_lens] for b in batches]
        # Floored at a picosecond: the log-space interpolation needs positive times.
        time_s.append(tuple(tuple(max(time_fn(cand, b, t), 1e-12) for t in seq_lens)
                            for b in batches))
        hbm.append(tuple(tuple(float(c.hbm_bytes) for c in row) for row in costs))
        flops.append(tuple(tuple(float(c.flops) for c in row) for row in costs))
    infos = tuple(CandidateInfo(c.name, c.params(), c.sram_bytes(dims)) for c in candidates)
    return _with_picks(PhaseTable(phase, batches, seq_lens, infos, tuple(time_s), tuple(hbm),
                                  tuple(flops), (), ()), budget_bytes)


def _with_picks(table: PhaseTable, budget_bytes: int) -> PhaseTable:
    """`table` with the fastest candidate within `budget_bytes` picked at every grid point."""
    sram = [c.sram_bytes for c in table.candidates]
    best = tuple(tuple(fastest([ts[i][j] for ts in table.time_s],
                               [hs[i][j] for hs in table.hbm_bytes], sram, budget_bytes)
                       for j in range(len(table.seq_lens))) for i in range(len(table.batches)))
    best_time = tuple(tuple(table.time_s[k][i][j] for j, k in enumerate(row))
                      for i, row in enumerate(best))
    return replace(table, best=best, best_time_s=best_time)


@dataclass(frozen=True)
class CostTable:
    """Every phase's table, the budget it was picked under, and where the figures come from."""

    phases: dict[str, PhaseTable]
    sram_budget_bytes: int
    dims: AttentionDims
    model_name: str
    fingerprint: dict[str, object]  # machine_fingerprint(), or {"analytic": hardware name}
    version: str  # refimpl version that built the table
    gemm: GemmProfile | None = None  # the profiled linear layers (None for analytic tables)
    info: dict[str, object] = field(default_factory=dict)  # profile mode, durations, MAPE

    def phase(self, phase: str) -> PhaseTable:
        """The table of `phase`; `ConfigError` for a phase it does not hold."""
        try:
            return self.phases[phase]
        except KeyError:
            raise ConfigError("phase", phase, "not in this table",
                              choices=self.phases) from None

    def predict_s(self, phase: str, batch: float, seq_len: float, clamp: bool = False) -> float:
        """Interpolated time of the fastest candidate of `phase` at (B, T)."""
        return self.phases[phase].predict_s(batch, seq_len, clamp)

    def lookup(self, phase: str, batch: float, seq_len: float,
               clamp: bool = False) -> tuple[str, float]:
        """(best candidate name, interpolated time) of `phase` at (B, T)."""
        return self.phases[phase].lookup(batch, seq_len, clamp)

    def with_budget(self, sram_budget_bytes: int) -> CostTable:
        """The same table with the picks made under another SRAM budget `S`."""
        return replace(self, sram_budget_bytes=sram_budget_bytes,
                       phases={p: _with_picks(t, sram_budget_bytes)
                               for p, t in self.phases.items()})

    def is_analytic(self) -> bool:
        """Whether the times are roofline predictions rather than measurements."""
        return "analytic" in self.fingerprint

    def save(self, path: Path) -> None:
        """Write the table as JSON (floats round-trip exactly)."""
        data = {"format_version": FORMAT_VERSION, **asdict(self)}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))


def _tuples(x):
    return tuple(_tuples(e) for e in x) if isinstance(x, list) else x


def _phase_from_json(d: dict) -> PhaseTable:
    d.pop("_log_b", None)
    d.pop("_log_t", None)
    d["candidates"] = tuple(CandidateInfo(**c) for c in d["candidates"])
    return PhaseTable(**{k: (_tuples(v) if k != "candidates" else v) for k, v in d.items()})


def load_table(path: Path, *, refuse_foreign: bool = False) -> CostTable:
    """Read a table written by `CostTable.save`.

    A measured table from another machine or refimpl version still loads, with a
    `ForeignTableWarning` (its figures remain a useful first guess, and online calibration
    corrects them), or raises `ConfigError` with `refuse_foreign`. Another file format is
    always refused. Analytic tables belong to no machine and are never foreign.
    """
    from refimpl.config.probe import machine_fingerprint

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise ConfigError("table", str(path), f"cannot be read: {error}") from None
    if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
        found = data.get("format_version") if isinstance(data, dict) else None
        raise ConfigError("format_version", found, f"{path} is not a cost table of format "
                          f"{FORMAT_VERSION}; run `refimpl profile` again")
    del data["format_version"]
    data["phases"] = {p: _phase_from_json(t) for p, t in data["phases"].items()}
    data["dims"] = AttentionDims(**data["dims"])
    if data["gemm"] is not None:
        data["gemm"] = GemmProfile(**{k: tuple(v) for k, v in data["gemm"].items()})
    table = CostTable(**data)
    if not table.is_analytic():
        here = machine_fingerprint()
        problems = [f"{key}: table {table.fingerprint.get(key)!r}, here {here[key]!r}"
                    for key in here if table.fingerprint.get(key) != here[key]]
        if table.version != __version__:
            problems.append(f"refimpl: table {table.version}, here {__version__}")
        if problems:
            message = f"{path} was measured elsewhere ({'; '.join(problems)})"
            if refuse_foreign:
                raise ConfigError("table", str(path), message)
            warnings.warn(message, ForeignTableWarning, stacklevel=2)
    return table


def default_table_path(model_name: str) -> Path:
    """Where `refimpl profile` saves this machine's table for `model_name` by default."""
    from refimpl.config.probe import cache_dir, machine_fingerprint

    key = json.dumps({"fingerprint": machine_fingerprint(), "version": __version__},
                     sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir() / f"costmodel-{model_name}-{digest}.json"
