"""One local Ray cluster for the session's Ray tests (2 CPUs, no dashboard, files in /tmp)."""

from __future__ import annotations

import shutil
import tempfile

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    """An embedded Ray cluster of 2 CPUs, started once; skipped when Ray is not importable."""
    ray = pytest.importorskip("ray", reason="Ray is not installed: the Ray executor is untested")
    from refimpl.engine import prepare_loop
    from refimpl.sweeps.ray_pool import init_ray

    prepare_loop()  # the workers load the loop this compiles
    # Short, under /tmp: Ray's socket paths must fit in 107 bytes.
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    init_ray(num_cpus=2, temp_dir=temp_dir)
    yield ray
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def small_grid():
    """4 quick cells: two policies x two rates, 120 requests each."""
    from refimpl.sweeps import SweepGrid

    return SweepGrid(policies=("slo", "vllm"), rates=(20.0, 60.0), num_requests=120)
