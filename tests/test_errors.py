"""The error hierarchy: ValueErrors that name field and value, and survive pickling."""

from __future__ import annotations

import pickle

import pytest

from refimpl.errors import (
    CapacityError,
    ConfigError,
    KernelInputError,
    RefimplError,
    TraceFormatError,
)


@pytest.mark.parametrize("cls", [ConfigError, TraceFormatError, KernelInputError, CapacityError])
def test_every_area_error_is_a_refimpl_value_error(cls):
    error = cls("field", 3, "is wrong")
    assert isinstance(error, RefimplError) and isinstance(error, ValueError)
    assert str(error) == "field=3: is wrong"


def test_message_lists_choices_and_location():
    error = TraceFormatError("ContextTokens", "-4", "must be >= 0", where="conv.csv:17",
                             choices=["a", "b"])
    assert str(error) == "conv.csv:17: ContextTokens='-4': must be >= 0 (choose from: a, b)"
    assert (error.field, error.value, error.where) == ("ContextTokens", "-4", "conv.csv:17")


def test_errors_pickle_with_their_fields():
    error = CapacityError("num_tokens", 10**6, "exceeds the pool", where="pool")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is CapacityError
    assert str(copy) == str(error) and copy.field == "num_tokens"
