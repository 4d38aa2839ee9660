"""Shared test set-up: caches outside the repository and the user's home, and the traces.

Numba compiles each kernel once per machine; pointing `NUMBA_CACHE_DIR` at one shared folder
(unless CI already did) lets every test process reuse the compiled kernels instead of writing
`__pycache__` files into the checkout. refimpl's own cache folder (probe figures, cost tables,
practice progress) is a fresh temporary folder for each test session, set before any test
module is imported and inherited by the processes the tests start, so no test reads or writes
the user's `~/.cache/refimpl` (tests/test_home_untouched.py proves it).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(tempfile.gettempdir()) / "refimpl-numba-cache"))
# Not setdefault: a REFIMPL_CACHE_DIR already set is the user's real cache.
os.environ["REFIMPL_CACHE_DIR"] = tempfile.mkdtemp(prefix="refimpl-test-cache-")
atexit.register(shutil.rmtree, os.environ["REFIMPL_CACHE_DIR"], True)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRACES = Path(os.environ.get("REFIMPL_TRACES", SHARED / "traces"))


@pytest.fixture
def traces_dir() -> Path:
    """The folder of public traces; tests that need it skip cleanly when it is absent."""
    if not TRACES.is_dir():
        pytest.skip(f"public traces not found at {TRACES} (set REFIMPL_TRACES)")
    return TRACES


# ---- small engines over hand-made requests (tests/engine, tests/sched) ------------------------
ENGINE_MODEL = "llama-3-8b"
ENGINE_HARDWARE = "h100-sxm"


@pytest.fixture
def step_model():
    """The analytic step model of llama-3-8b on an H100."""
    from refimpl import HardwareSpec, ModelConfig
    from refimpl.costmodel import RooflineStepModel

    return RooflineStepModel(ModelConfig.preset(ENGINE_MODEL), HardwareSpec.preset(ENGINE_HARDWARE))


@pytest.fixture
def make_engine(step_model):
    """`make_engine(policy, num_pages=..., page_size=..., gate=..., **policy_params)` -> a
    fresh Engine over a page pool of that size."""
    from refimpl.engine import Engine, SimulatedExecutor
    from refimpl.engine.simulate import cost_table_for
    from refimpl.kv import PagePool
    from refimpl.sched import make_policy

    def build(policy="vllm", *, num_pages=4096, page_size=16, gate=None, **params):
        model, hardware = step_model.model, step_model.hardware
        pool = PagePool(num_pages, page_size, max_context=model.max_context,
                        cpu_tier_pages=num_pages)
        return Engine(make_policy(policy, **params), SimulatedExecutor(step_model), pool, model,
                      hardware=hardware, cost_table=cost_table_for(model, hardware), gate=gate)

    return build


@pytest.fixture
def make_requests():
    """`make_requests([(arrival_s, prompt_tokens, max_new_tokens), ...])`, ids from 0."""
    from refimpl.sched import Request

    return lambda specs: [Request(i, a, p, n) for i, (a, p, n) in enumerate(specs)]
