"""`refimpl calibrate-gpu`: fit the GPU presets' efficiencies to Vidur's profiles; score them."""

from __future__ import annotations

import argparse
from pathlib import Path

from refimpl.config import HardwareSpec, ModelConfig
from refimpl.config.efficiency import Efficiency

# The batches the calibration is checked on, beside Vidur's own linear-layer times: a
# 1,000-token prefill and decode batches of 1 to 128 sequences (Llama-2-7B, 32 layers, TP 1).
BATCHES = (1000, 1, 8, 32, 64, 128)
LLAMA2_7B = "meta-llama/Llama-2-7b-hf"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `calibrate-gpu` subcommand."""
    parser = subparsers.add_parser(
        "calibrate-gpu", help="fit GPU operator efficiencies to Vidur's profiles; print MAPE",
        description="Fit each GPU's operator efficiencies (refimpl.config.efficiency) to "
        "Vidur's public per-operator profiles in DIR (compute_<gpu>_<org>_<model>_mlp.csv, "
        "network_<gpu>_dgx_all_reduce.csv; see refimpl.costmodel.gpu_profiles), and print "
        "the fitted figures and the MAPE per operator group on held-out rows and on a model "
        "shape held out of the fit.")
    parser.add_argument("--profiles", type=Path, required=True, metavar="DIR",
                        help="folder of Vidur's profile CSVs")
    parser.add_argument("--held-out-shape", metavar="NAME", help="the model shape to hold out "
                        "(default: each GPU's last in name order)")
    parser.set_defaults(run=run)


def _figures(eff: Efficiency) -> str:
    g = eff.gemm
    lines = [f"  gemm: launch {g.launch_s * 1e6:.2f} us, compute {g.compute_efficiency:.3f}, "
             f"weight read {g.weight_read_efficiency:.3f}, rows_half {g.rows_half:.4g}, "
             f"sharpness {g.sharpness:.4g}, tile {g.tile_rows} rows"]
    for op in ("norm", "rope", "act", "add", "emb"):
        fit = getattr(eff, op)
        lines.append(f"  {op}: launch {fit.launch_s * 1e6:.2f} us, bandwidth "
                     f"{fit.efficiency:.3f} in cache, {fit.spill_efficiency:.3f} past "
                     f"{fit.cache_bytes / 1e6:.4g} MB, sharpness {fit.sharpness:.4g}, "
                     f"row floor {fit.row_latency_s_per_byte * 1e15:.4g} fs/B, "
                     f"row {fit.row_s * 1e12:.4g} ps")
    lines += [f"  all-reduce x{link.num_gpus}: launch {link.launch_s * 1e6:.1f} us, "
              f"{link.bytes_per_s / 1e9:.0f} GB/s" for link in eff.all_reduce]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Fit and print, GPU by GPU."""
    from refimpl.costmodel.gpu_fit import GROUPS, linear_layers_s, score
    from refimpl.costmodel.gpu_profiles import GPU_PRESETS, read_profiles

    compute, network = read_profiles(args.profiles)
    for gpu in sorted({p.gpu for p in compute}):
        hw = HardwareSpec.preset(GPU_PRESETS[gpu])
        mine = [p for p in compute if p.gpu == gpu]
        held = args.held_out_shape or sorted(p.model.name for p in mine)[-1]
        result = score(mine, [n for n in network if n.gpu == gpu], hw, held, "")
        print(f"{gpu} ({hw.name}), shapes: {', '.join(p.model.name for p in mine)}")
        print(_figures(result.efficiency))
        print(f"  MAPE %        held-out rows   held-out shape ({held})")
        for group in GROUPS:
            print(f"  {group:<12}  {result.held_rows[group]:>13.1f}   "
                  f"{result.held_shape_mape[group]:>14.1f}")
        shape = next((p for p in mine if p.model.name == LLAMA2_7B), None)
        if shape is not None:
            layers = ModelConfig.preset("llama-2-7b").num_layers
            print("  Llama-2-7B linear layers, TP 1: rows, fitted ms, Vidur ms, error")
            for rows in BATCHES:
                pair = linear_layers_s(result.efficiency, hw, shape, rows, layers)
                if pair is not None:
                    print(f"  {rows:>6}  {pair[0] * 1e3:8.2f}  {pair[1] * 1e3:8.2f}  "
                          f"{100 * (pair[0] / pair[1] - 1):+6.1f}%")
    return 0
