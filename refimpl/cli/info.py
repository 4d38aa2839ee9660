"""`refimpl info`: versions, this machine's caches and SRAM budget, and every preset."""

from __future__ import annotations

import argparse
import platform
from importlib.metadata import PackageNotFoundError, version

from refimpl._version import __version__
from refimpl.config import MODEL_PRESETS, HardwareSpec, preset_names
from refimpl.config.hardware import local_cpu_spec
from refimpl.config.probe import cache_dir, detect_caches
from refimpl.report.units import format_bytes, format_count, format_rate

REQUEST_TOKENS = 4096  # the request size whose KV footprint `info` shows


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `info` subcommand."""
    parser = subparsers.add_parser(
        "info",
        help="versions, detected caches, SRAM budget, hardware and model presets",
        description="Print versions, this machine's caches and SRAM budget, and all presets. "
        "The first call measures memory bandwidth and FLOP/s (about a second) and saves them "
        "as this machine's `cpu-local` figures; it is the only command that saves them.",
    )
    parser.add_argument(
        "--remeasure", action="store_true", help="measure this machine again instead of "
        "reading the cached probe"
    )
    parser.set_defaults(run=run)


def _version_of(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def run(args: argparse.Namespace) -> int:
    """Print the report."""
    print(f"refimpl {__version__}  (python {platform.python_version()}, "
          f"numba {_version_of('numba')}, numpy {_version_of('numpy')})")
    caches = detect_caches()
    print(f"\ncaches of core 0 ({caches.source}):")
    for label, size in (("L1d", caches.l1d_bytes), ("L2", caches.l2_bytes),
                        ("L3", caches.l3_bytes)):
        print(f"  {label:<4}{format_bytes(size) if size else 'unknown':>12}")
    # The one command that saves the probe (other commands only read it or measure in memory).
    local = local_cpu_spec(remeasure=args.remeasure, save=True)
    print(f"SRAM budget S (default: L2 per core): {format_bytes(local.sram_bytes)}")
    print(f"probe results cached in {cache_dir()}")

    print("\nhardware presets:")
    print(f"  {'name':<14}{'SRAM':>11}{'memory':>11}{'bandwidth':>13}{'peak':>15}  kind "
          "(figures per GPU)")
    for name in preset_names():
        hw = local if name == "cpu-local" else HardwareSpec.preset(name)
        kind = ("measured here" if not hw.analytic else "spec sheet, efficiencies fitted"
                if hw.efficiency is not None else "spec sheet (analytic)")
        kind += f", {hw.num_gpus} GPUs tensor-parallel" if hw.num_gpus > 1 else ""
        print(f"  {name:<14}{format_bytes(hw.sram_bytes):>11}{format_bytes(hw.memory_bytes):>11}"
              f"{format_rate(hw.memory_bandwidth_bytes_s, 'B/s'):>13}"
              f"{format_rate(hw.peak_flops, 'FLOP/s'):>15}  {kind}")

    print("\nmodel presets (KV bytes = 2 * layers * kv_heads * head_dim * dtype bytes):")
    print(f"  {'name':<12}{'layers':>7}{'heads':>6}{'kv':>4}{'d':>5}{'kv dtype':>10}"
          f"{'params':>9}{'KV/token':>12}{f'KV/{REQUEST_TOKENS // 1024}k req':>12}")
    for model in MODEL_PRESETS.values():
        print(f"  {model.name:<12}{model.num_layers:>7}{model.num_heads:>6}"
              f"{model.num_kv_heads:>4}{model.head_dim:>5}{model.kv_dtype:>10}"
              f"{format_count(model.num_parameters()):>9}"
              f"{model.kv_bytes_per_token():>12,}{format_bytes(model.kv_bytes(REQUEST_TOKENS)):>12}")
    return 0
