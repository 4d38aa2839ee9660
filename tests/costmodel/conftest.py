"""Fixtures of the cost-model tests."""

from __future__ import annotations

import pytest

from refimpl.costmodel.table import CostTable

from ._helpers import synthetic_table


@pytest.fixture(scope="session")
def table() -> CostTable:
    return synthetic_table()
