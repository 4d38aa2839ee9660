"""`refimpl bench sweep`: a 48-cell sweep on Ray with 2 workers against the same sweep serially.

Six policies x four rates x two seeds of the embedded workload (Llama-3-8B on an H100), each
cell a whole simulated run, timed in one process: first serially (no Ray, the loop already
compiled), then on an embedded Ray cluster, whose cost is split into its parts: starting the
cluster (`ray.init`), starting the workers and loading each one's serving loop from Numba's
cache, and the sweep itself. The speed-up is given without and with that start-up, beside how
many cores two plain processes (no Ray) got at the time: the bound on any speed-up. Both sweeps
write to fresh folders (no cell is cached), and their tables are checked to be the same in
every column but the wall-clock ones. On a shared machine the figures move with the load of
whatever else runs: the speed-up of one run is a sample, not a constant.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from refimpl.bench._report import publish
from refimpl.engine import prepare_loop
from refimpl.sched import POLICIES
from refimpl.sweeps import MEASURED_COLUMNS, SweepGrid, sweep

__all__ = ["run"]

PROBE_RUNS = 3  # simulations per process in the probe of how many cores are free
RATES = (10.0, 20.0, 30.0, 40.0)  # requests/s: from well under to past the policies' capacity
SEEDS = (0, 1)


def _probe_work(_: int) -> float:
    """Seconds for a fixed few simulations in a fresh process (its loop warmed first)."""
    import refimpl
    from refimpl.engine import warm_up

    warm_up()
    started = time.perf_counter()
    for _ in range(PROBE_RUNS):
        refimpl.simulate("azure-conv-like", "sarathi", num_requests=8000, rate=20.0)
    return time.perf_counter() - started


def free_cores(workers: int) -> float:
    """How many cores `workers` processes get now: `workers` x (the work's time alone / its
    time with all of them at once), plain processes without Ray. On an idle machine with
    that many cores, about `workers`; it bounds what any executor can speed up by."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1) as pool:
        alone_s = min(pool.map(_probe_work, range(2)))
    with ProcessPoolExecutor(workers) as pool:
        together_s = sum(pool.map(_probe_work, range(workers))) / workers
    return workers * alone_s / together_s


def run(*, quick: bool = False, num_threads: int | None = None,
        json_path: Path | None = None) -> dict:
    """Time the grid serially and on Ray (`num_threads` workers, default 2); print, write."""
    from refimpl.sweeps.ray_pool import import_ray, init_ray

    ray = import_ray()
    workers = num_threads or 2
    grid = SweepGrid(policies=POLICIES, rates=RATES, seeds=SEEDS,
                     num_requests=2000 if quick else 8000)
    num_cells = len(grid.cells())
    compile_s = prepare_loop()
    print(f"bench sweep: {num_cells} cells of {grid.num_requests} requests, serially and on "
          f"Ray with {workers} workers ({len(os.sched_getaffinity(0))} cores here)",
          file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="refimpl-bench-sweep-") as folder:
        serial = sweep(grid, Path(folder) / "serial", workers=0)
        ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths
        started = time.perf_counter()
        init_ray(num_cpus=workers, temp_dir=ray_dir)
        ray_init_s = time.perf_counter() - started
        try:
            on_ray = sweep(grid, Path(folder) / "ray", workers=workers)
        finally:
            ray.shutdown()
            shutil.rmtree(ray_dir, ignore_errors=True)
    cores = free_cores(workers)  # after the sweeps: the same machine, moments later
    same = all(serial.table[k] == on_ray.table[k] for k in serial.table
               if k not in MEASURED_COLUMNS)
    ray_sweep_s = on_ray.wall_s - on_ray.startup_s
    report = {
        "suite": "sweep", "num_cells": num_cells, "num_requests": grid.num_requests,
        "policies": list(POLICIES), "rates": list(RATES), "seeds": list(SEEDS),
        "workers": on_ray.num_workers, "cores": len(os.sched_getaffinity(0)),
        "loop_compile_s": compile_s, "serial_s": serial.wall_s, "ray_init_s": ray_init_s,
        "ray_workers_ready_s": on_ray.startup_s, "ray_sweep_s": ray_sweep_s,
        "ray_total_s": ray_init_s + on_ray.wall_s,
        "speedup": serial.wall_s / ray_sweep_s,
        "speedup_with_startup": serial.wall_s / (ray_init_s + on_ray.wall_s),
        "cell_s_mean": serial.wall_s / num_cells, "tables_identical": same,
        # Each cell's own simulation time, summed: the same work on both sides, so a larger
        # sum on Ray is the workers' cores shared with something else (or with each other).
        "serial_cells_s": sum(serial.table["wall_s"]), "ray_cells_s": sum(on_ray.table["wall_s"]),
        "load_average": os.getloadavg(), "free_cores": cores,
    }
    return publish(report, print_report, json_path)


def print_report(report: dict) -> None:
    """The timings and the speed-ups."""
    r = report
    print(f"sweep of {r['num_cells']} cells ({len(r['policies'])} policies x "
          f"{len(r['rates'])} rates x {len(r['seeds'])} seeds, {r['num_requests']:,} requests "
          f"each; {r['cell_s_mean']:.2f} s a cell serially)")
    print(f"  serial (no Ray)          {r['serial_s']:7.1f} s")
    print(f"  Ray, {r['workers']} workers: sweep     {r['ray_sweep_s']:7.1f} s   "
          f"speed-up {r['speedup']:.2f}x")
    print(f"    start-up: ray.init {r['ray_init_s']:.1f} s, workers ready (loop loaded from "
          f"the Numba cache) {r['ray_workers_ready_s']:.1f} s")
    print(f"    with start-up          {r['ray_total_s']:7.1f} s   speed-up "
          f"{r['speedup_with_startup']:.2f}x")
    print(f"  the cells' own simulation time, summed: serial {r['serial_cells_s']:.1f} s, on Ray "
          f"{r['ray_cells_s']:.1f} s ({r['ray_cells_s'] / r['serial_cells_s']:.2f}x: cores "
          "shared with the other worker and the rest of the machine)")
    print(f"  cores free to {r['workers']} plain processes (no Ray) just after: "
          f"{r['free_cores']:.2f} (the most any executor could speed up by, now)")
    print(f"  tables identical (but wall-clock columns): {r['tables_identical']}; "
          f"load average {', '.join(f'{x:.2f}' for x in r['load_average'])} "
          f"on {r['cores']} cores")
