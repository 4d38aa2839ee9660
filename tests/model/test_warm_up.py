"""`warm_up_kernels`: every attention kernel a served step can call has made its first call."""

from __future__ import annotations

import pytest

import refimpl.model.forward as forward
from refimpl.model import warm_up_kernels

pytestmark = pytest.mark.numba


def _spied_calls(monkeypatch) -> list[tuple[str, str, int]]:
    """(kernel, page format, query rows) of each attention call the forward pass makes."""
    calls = []
    for name in ("decode_attention", "chunk_attention"):
        kernel = getattr(forward, name)

        def spy(q, k_cache, *args, _kernel=kernel, _name=name, **kwargs):
            calls.append((_name, getattr(k_cache, "fmt", "float32"), q.shape[-2]))
            return _kernel(q, k_cache, *args, **kwargs)

        monkeypatch.setattr(forward, name, spy)
    return calls


@pytest.mark.parametrize("fmt", ["int8", "fp8_e4m3"])
@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_decode_and_chunk_run_on_float_and_quantized_pages(model, monkeypatch, fmt, page_size):
    calls = _spied_calls(monkeypatch)
    seconds = warm_up_kernels(model, page_size, fmt)
    assert seconds > 0
    kinds = {(name, page_format) for name, page_format, _ in calls}
    assert kinds == {(kernel, page_format) for kernel in ("decode_attention", "chunk_attention")
                     for page_format in ("float32", fmt)}
    # the chunks are real chunks (more than one query row), on either kind of page
    assert all(rows > 1 for name, _, rows in calls if name == "chunk_attention")


def test_a_bad_format_is_refused_by_name(model):
    from refimpl.errors import KVCacheError

    with pytest.raises(KVCacheError, match="quantized_format"):
        warm_up_kernels(model, 16, "int4")


@pytest.mark.parametrize("page_size", [0, -4, 2.5, True])
def test_a_bad_page_size_is_refused_by_name(model, page_size):
    from refimpl.errors import ConfigError

    with pytest.raises(ConfigError, match="page_size"):
        warm_up_kernels(model, page_size)
