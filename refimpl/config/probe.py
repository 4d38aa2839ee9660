"""This machine, read and measured: cache sizes from the OS, bandwidth and FLOP/s by a probe.

The probe takes about a second, so its result is saved as JSON in refimpl's cache folder
(`REFIMPL_CACHE_DIR`, else `$XDG_CACHE_HOME/refimpl`, else `~/.cache/refimpl`), keyed by a
fingerprint of the CPU and the library versions; a changed fingerprint or `remeasure=True`
(`refimpl info --remeasure`) measures again. Only `refimpl info` saves (`save=True`): a figure
taken while the machine is busy (a test suite, a benchmark) would otherwise stay as this
machine's figure, so every other caller measures in memory, once per process, when nothing is
saved.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from refimpl._timing import best_seconds

__all__ = ["CacheInfo", "LocalMachine", "cache_dir", "detect_caches", "local_machine",
           "machine_fingerprint"]

_PROBE_VERSION = 1  # bump when the probe changes, so old cached figures are measured again
_FALLBACK_L2_BYTES = 1 << 20


@dataclass(frozen=True)
class CacheInfo:
    """Per-core data cache sizes in bytes (0 where the OS does not say) and how they were read."""

    l1d_bytes: int
    l2_bytes: int
    l3_bytes: int
    source: str


def cache_dir() -> Path:
    """The folder where refimpl keeps machine-specific files (probe results, cost tables)."""
    if os.environ.get("REFIMPL_CACHE_DIR"):
        return Path(os.environ["REFIMPL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "refimpl"


def _parse_size(text: str) -> int:
    """'512K' / '32768K' / '2M' / '1048576' (sysfs and sysctl styles) to bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in scale:
        return int(float(text[:-1]) * scale[text[-1]])
    return int(text)


def _caches_from_sysfs(root: Path) -> CacheInfo | None:
    sizes: dict[int, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in {"Data", "Unified"}:
            sizes[level] = size
    if 2 not in sizes:
        return None
    return CacheInfo(sizes.get(1, 0), sizes[2], sizes.get(3, 0), source=str(root))


def _caches_from_sysctl() -> CacheInfo | None:
    def read(key: str) -> int:
        out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, check=False)
        return int(out.stdout.strip() or 0)

    try:
        l2 = read("hw.l2cachesize")
        if l2 <= 0:
            return None
        return CacheInfo(read("hw.l1dcachesize"), l2, read("hw.l3cachesize"), source="sysctl")
    except (OSError, ValueError):
        return None


def detect_caches() -> CacheInfo:
    """Cache sizes of core 0; 1 MiB of L2 is assumed (and said) where the OS gives none."""
    found = None
    if sys.platform.startswith("linux"):
        found = _caches_from_sysfs(Path("/sys/devices/system/cpu/cpu0/cache"))
    elif sys.platform == "darwin":
        found = _caches_from_sysctl()
    return found or CacheInfo(0, _FALLBACK_L2_BYTES, 0, source="assumed (OS gave no sizes)")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def sram_bytes() -> int:
    """This machine's SRAM budget: its L2 per core."""
    return detect_caches().l2_bytes


def machine_fingerprint() -> dict[str, object]:
    """What identifies this machine's measurements: CPU, caches, cores, library versions."""
    caches = detect_caches()
    return {
        "cpu": _cpu_model(),
        "machine": platform.machine(),
        "cores": os.cpu_count() or 1,
        "l1d_bytes": caches.l1d_bytes,
        "l2_bytes": caches.l2_bytes,
        "l3_bytes": caches.l3_bytes,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "probe_version": _PROBE_VERSION,
    }


def _measure(l3_bytes: int) -> dict[str, float]:
    """Read and copy bandwidth on an array well past the last-level cache; fp32 GEMM FLOP/s."""
    nbytes = max(256 << 20, 8 * l3_bytes)
    big = np.ones(nbytes // 4, dtype=np.float32)
    out = np.empty_like(big)
    read_s = best_seconds(lambda: big.sum(), repeats=3)
    copy_s = best_seconds(lambda: np.copyto(out, big), repeats=3)
    n = 1024
    a = np.ones((n, n), dtype=np.float32)
    b = np.ones((n, n), dtype=np.float32)
    gemm_s = best_seconds(lambda: a @ b, repeats=5)
    return {
        "memory_bandwidth_bytes_s": nbytes / read_s,
        "copy_bandwidth_bytes_s": nbytes / copy_s,  # bytes moved one way
        "peak_flops": 2 * n**3 / gemm_s,
    }


# Figures measured in this process but not saved, by fingerprint: measured once per process.
_MEASURED: dict[str, dict[str, float]] = {}


@dataclass(frozen=True)
class LocalMachine:
    """What the probe found of this machine (refimpl.config.hardware makes it a preset)."""

    sram_bytes: int  # L2 per core: the SRAM budget
    memory_bytes: int
    memory_bandwidth_bytes_s: float
    peak_flops: float
    host_bandwidth_bytes_s: float  # a large copy's
    source: str


def local_machine(*, remeasure: bool = False, save: bool = False) -> LocalMachine:
    """This machine's caches, memory and probed speeds."""
    # The saved probe if any (and not `remeasure`), else a measurement, saved only if `save`.
    fingerprint = machine_fingerprint()
    key = json.dumps(fingerprint, sort_keys=True)
    path = cache_dir() / "hardware-cpu-local.json"
    figures = None if remeasure else _MEASURED.get(key)
    if figures is None and not remeasure and path.exists():
        try:
            saved = json.loads(path.read_text())
            if saved.get("fingerprint") == fingerprint:
                figures = saved["figures"]
        except (OSError, ValueError, KeyError):
            figures = None  # a damaged cache file is measured again, not trusted
    measured = figures is None or figures is _MEASURED.get(key)
    if figures is None:
        figures = _MEASURED[key] = _measure(int(fingerprint["l3_bytes"]))
    if save and measured:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"fingerprint": fingerprint, "figures": figures}, indent=2))
        tmp.replace(path)  # atomic: a concurrent reader sees the old or the new file
    caches = detect_caches()
    return LocalMachine(
        sram_bytes=sram_bytes(),
        memory_bytes=_memory_bytes(),
        memory_bandwidth_bytes_s=figures["memory_bandwidth_bytes_s"],
        peak_flops=figures["peak_flops"],
        host_bandwidth_bytes_s=figures["copy_bandwidth_bytes_s"],
        source=f"measured on {fingerprint['cpu']}; caches from {caches.source}",
    )

