"""One cell of a sweep: every setting of one reproducible simulated run, and its cache key.

A cell is plain data (picklable, so it travels to Ray workers as it is). Its key is a hash of
all its settings, of the workload file's bytes where the workload is a trace, of refimpl's
version, and of the fingerprint of the sources the serving loop is compiled from
(`refimpl._numba.sources_fingerprint`, which also decides when the loop is recompiled): two
cells with the same key give the same run, so a finished cell is never redone, and a new
version, an edited scheduler or an edited trace file never reuses an old result.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from refimpl._version import __version__
from refimpl.workloads.synthetic import SYNTHETIC

__all__ = ["KEY_LENGTH", "Cell"]

KEY_LENGTH = 16  # hex digits of the key kept: 64 bits, no collision in any plausible sweep


@dataclass(frozen=True)
class Cell:
    """The settings of one simulated run (see `refimpl.simulate` for each one's meaning)."""

    workload: str  # a synthetic name or a trace path
    policy: str
    rate: float | None  # requests/s; None: the workload's own
    slo: str  # an SLO preset, named set or NAME:SHARE,... spec (refimpl.sweeps.grid)
    seed: int
    policy_params: dict = field(default_factory=dict)
    num_requests: int | None = 500
    model: str = "llama-3-8b"
    hardware: str = "h100-sxm"
    step_model: str = "auto"
    admission: bool | None = None

    def settings(self) -> dict:
        """The cell's settings as plain JSON data (the table's and the run report's columns)."""
        return {"workload": self.workload, "policy": self.policy, "rate": self.rate,
                "slo": self.slo, "seed": self.seed, "policy_params": dict(self.policy_params),
                "num_requests": self.num_requests, "model": self.model,
                "hardware": self.hardware, "step_model": self.step_model,
                "admission": self.admission}

    def key(self) -> str:
        """The hash of everything that decides this cell's run, refimpl's version included."""
        identity = {**self.settings(), "refimpl_version": __version__,
                    "sources": _compiled_sources_fingerprint(),
                    "workload_sha256": _file_sha256(self.workload)}
        text = json.dumps(identity, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:KEY_LENGTH]

    def label(self) -> str:
        """A short human name: `vllm @ 10 req/s, default, seed 0`."""
        rate = "own rate" if self.rate is None else f"{self.rate:g} req/s"
        params = "".join(f" {k}={v}" for k, v in sorted(self.policy_params.items()))
        return f"{self.policy}{params} @ {rate}, {self.slo}, seed {self.seed}"


def _compiled_sources_fingerprint() -> str:
    """`refimpl._numba.sources_fingerprint()`, imported by name: that fingerprint counts every
    file whose code names `refimpl._numba` in an import as compiled source, and this file holds
    no compiled code, so an edit here must not make Numba recompile the loop."""
    return importlib.import_module("refimpl._numba").sources_fingerprint()


def _file_sha256(workload: str) -> str | None:
    """The trace file's content hash (None for a synthetic name)."""
    path = Path(workload)
    if workload in SYNTHETIC or not path.is_file():  # a synthetic name wins, as in simulate
        return None
    stat = path.stat()
    return _hash_file(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _hash_file(path: str, mtime_ns: int, size: int) -> str:
    """Hashed once per file version (mtime and size in the cache key), not once per cell."""
    del mtime_ns, size
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
