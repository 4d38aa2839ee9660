"""The real engine's step profile: the grid it times, the fit, and what it tells the terminal."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.engine.step_profile import profile_steps, step_grid
from tests.engine._real import CONFIG, small_model

pytestmark = pytest.mark.numba


def test_the_profile_times_every_shape_fits_them_and_reports_each_pass():
    heard = []
    profile = profile_steps(small_model(), repeats=2, progress=lambda *a: heard.append(a))
    shapes = step_grid(CONFIG.max_context)
    assert len(profile.counts) == len(profile.seconds) == len(shapes)
    assert (profile.seconds > 0).all() and profile.heldout.sum() == len(shapes) // 4
    assert np.isfinite(profile.heldout_mape) and profile.heldout_mape >= 0
    # one row of counts per shape, e.g. 32 decodes of 32 tokens of context each
    assert [0, 0, 32, 32 * 32] in profile.counts.tolist()
    # the first calls (where a new machine compiles the kernels) are said before any pass
    assert heard[0] == (0, 2, "first calls: kernels compile or load")
    assert heard[1:] == [(1, 2), (2, 2)]
