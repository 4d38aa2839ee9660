"""A sweep on Ray (a local cluster, 2 workers) gives the same table as the serial one."""

from __future__ import annotations

import pytest

from refimpl.sweeps import MEASURED_COLUMNS, sweep


@pytest.mark.slow
def test_a_sweep_gives_the_same_table_serially_and_on_ray_with_two_workers(
        ray_cluster, small_grid, tmp_path):
    serial = sweep(small_grid, tmp_path / "serial", workers=0)
    on_ray = sweep(small_grid, tmp_path / "ray", workers=2)
    assert on_ray.num_workers == 2 and on_ray.num_cached == 0
    assert on_ray.startup_s > 0
    assert set(serial.table) == set(on_ray.table)
    for column in serial.table:
        if column not in MEASURED_COLUMNS:
            assert serial.table[column] == on_ray.table[column], column
    assert len(serial.table["cell"]) == 4
    # The Ray run's cells are cached too: a second run starts no worker.
    again = sweep(small_grid, tmp_path / "ray", workers=2)
    assert again.num_cached == 4 and again.startup_s == 0


def test_a_cell_that_fails_on_a_worker_raises_its_own_error_in_the_driver(
        ray_cluster, tmp_path):
    from refimpl.errors import CapacityError
    from refimpl.sweeps import SweepGrid

    # Llama-2-70B's weights alone exceed one H100's memory: the run itself refuses it.
    grid = SweepGrid(policies=("vllm",), rates=(10.0,), num_requests=20, model="llama-2-70b")
    with pytest.raises(CapacityError, match="model='llama-2-70b'"):
        sweep(grid, tmp_path, workers=2)
