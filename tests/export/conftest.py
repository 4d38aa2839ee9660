"""One small simulated run shared by the export tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def small_run():
    """60 requests through sarathi (chunked prefill: steps with both prefill and decode)."""
    import refimpl

    return refimpl.simulate("azure-conv-like", "sarathi", num_requests=60, rate=20.0)
