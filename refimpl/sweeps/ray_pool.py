"""Cells run on Ray: an embedded local cluster by default, or an existing one at `address`.

The engine Vidur and Sarathi-Serve run their capacity searches on. One actor per worker, each
holding one CPU, so a worker process loads the compiled serving loop once (from the Numba
cache the driver filled: workers load, they do not recompile) and then serves cell after cell.
Each worker runs with one Numba thread and one BLAS thread: the parallelism is across cells,
and a second thread per worker would only contend for the same cores. The driver keeps every
actor busy with one cell and hands out the next as each result comes back (`ray.wait`), so a
slow cell never holds the others; results are stored by the caller as they arrive.

An embedded cluster starts with token authentication held in this process's environment (a
fresh random token, unless one is set already), so Ray writes no token file under the home
folder, and without the dashboard. Ray's own files go to `temp_dir` (Ray's default:
/tmp/ray).
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Sequence

from refimpl.engine import prepare_loop
from refimpl.errors import ConfigError
from refimpl.sweeps.cell import Cell
from refimpl.sweeps.serial import OnDone
from refimpl.sweeps.work import run_cell

__all__ = ["RayExecutor", "import_ray", "init_ray", "worker_env"]

# One thread each for Numba and every BLAS a worker might load: cells are the parallelism.
_ONE_THREAD = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "MKL_NUM_THREADS")
# The driver's cache folders, passed on so workers share the compiled kernels and tables.
_SHARED_CACHES = ("NUMBA_CACHE_DIR", "REFIMPL_CACHE_DIR")
_AUTH_SETTINGS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")  # the user's own


def import_ray():
    """The `ray` module, or a `ConfigError` saying how to run without it."""
    try:
        import ray
    except ImportError as error:
        raise ConfigError("workers", "ray", f"Ray is not importable ({error}); install it "
                          "(pip install ray) or run with --serial") from None
    return ray


def worker_env() -> dict[str, str]:
    """The environment variables every worker gets."""
    env = dict.fromkeys(_ONE_THREAD, "1")
    env.update({name: os.environ[name] for name in _SHARED_CACHES if name in os.environ})
    return env


def init_ray(num_cpus: int | None = None, address: str | None = None,
             temp_dir: str | None = None) -> None:
    """Join the cluster at `address`, or start an embedded one of `num_cpus` CPUs (None: one
    per core), its workers in `worker_env()`."""
    ray = import_ray()
    options = {"runtime_env": {"env_vars": worker_env()}, "log_to_driver": False}
    if address is not None:
        _check_reachable(address)
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError) as error:  # no cluster there, or a refusal
            raise ConfigError("address", address, "cannot join a Ray cluster there "
                              f"({str(error).strip().splitlines()[0]})") from None
        return
    if not any(name in os.environ for name in _AUTH_SETTINGS):
        # In this process's environment (inherited by the cluster it starts), so Ray does not
        # generate a token into ~/.ray/auth_token.
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    ray.init(num_cpus=num_cpus or len(os.sched_getaffinity(0)), include_dashboard=False,
             _temp_dir=temp_dir, **options)


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse a HOST:PORT nothing answers at, at once: Ray itself retries for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # `auto`, `local` and the like: Ray's own names, for Ray to resolve
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError("address", address, f"nothing answers there ({reason})") from None


class CellWorker:
    """A Ray actor's body: warms the serving loop once, then runs cells."""

    def warm_up(self) -> float:
        from refimpl.engine import warm_up

        return warm_up()

    def run(self, cell: Cell, with_requests: bool):
        return run_cell(cell, with_requests)


class RayExecutor:
    """A context whose first `map` starts (or joins) Ray and warms up `num_workers` actors;
    its exit stops them (and the cluster, where it started one)."""

    def __init__(self, workers: int | None = None, address: str | None = None,
                 temp_dir: str | None = None) -> None:
        if workers is not None and workers < 1:
            raise ConfigError("workers", workers, "must be at least 1 on Ray (0: serial)")
        self.requested = workers
        self.address = address
        self.temp_dir = temp_dir
        self.num_workers = 0
        self.startup_s = 0.0  # Ray started or joined, and every actor's loop loaded
        self._ray = None
        self._started_ray = False
        self._actors: list = []

    def __enter__(self) -> RayExecutor:
        self._ray = import_ray()  # (a missing Ray fails now, not after the cached cells)
        if self.address is not None:
            _check_reachable(self.address)  # (as would a wrong address)
        return self

    def _start(self) -> None:
        """Start or join Ray and warm up the actors: on the first batch with work to do, so a
        sweep whose cells are all cached starts nothing."""
        ray = self._ray
        prepare_loop()  # workers load what this fills (not counted: a serial run does it too)
        started = time.perf_counter()
        if not ray.is_initialized():
            init_ray(self.requested, self.address, self.temp_dir)
            self._started_ray = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.num_workers = max(1, min(self.requested or cpus, cpus))
        actor = ray.remote(num_cpus=1)(CellWorker)
        self._actors = [actor.remote() for _ in range(self.num_workers)]
        ray.get([a.warm_up.remote() for a in self._actors])
        self.startup_s = time.perf_counter() - started

    def __exit__(self, *exc_info: object) -> None:
        ray = self._ray
        for actor in self._actors:
            ray.kill(actor)
        self._actors = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def map(self, cells: Sequence[Cell], on_done: OnDone, with_requests: bool = False) -> None:
        """Run every cell on the actors, calling `on_done(index, result)` as each finishes
        (in finishing order)."""
        ray = self._ray
        if not self._actors:
            self._start()
        pending = list(enumerate(cells))[::-1]  # popped from the end: grid order
        running: dict = {}  # object ref -> (cell index, actor)

        def submit(actor) -> None:
            index, cell = pending.pop()
            running[actor.run.remote(cell, with_requests)] = (index, actor)

        for actor in self._actors[:len(pending)]:
            submit(actor)
        while running:
            (ref,), _ = ray.wait(list(running), num_returns=1)
            index, actor = running.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayTaskError as error:
                raise error.cause if isinstance(error.cause, Exception) else error from None
            if pending:
                submit(actor)
            on_done(index, result)
