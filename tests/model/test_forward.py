"""The paged engine step reproduces the NumPy reference forward, however the work is cut."""

from __future__ import annotations

import numpy as np
import pytest

from refimpl.errors import ModelInputError
from refimpl.model import LlamaModel, LlamaWeights, SeqSlice, reference_logits
from refimpl.model.generate import greedy_decode, prefill, reference_greedy

from ._helpers import REL_TOL, SMALL, relative_error


@pytest.mark.parametrize("page_size", [1, 4, 16, 64])
def test_whole_prompt_prefill_matches_the_reference_at_every_page_size(model, weights, prompt,
                                                                       page_size):
    storage = model.storage_for(-(-prompt.size // page_size), page_size)
    table = np.arange(storage.num_pages)
    logits = prefill(model, storage, 0, prompt, table)
    assert relative_error(logits, reference_logits(weights, prompt)[-1]) < REL_TOL


@pytest.mark.parametrize("chunk_tokens", [1, 5, 16, 36])
def test_chunked_prefill_gives_the_reference_logits_at_the_end_of_every_chunk(
        model, weights, prompt, chunk_tokens):
    expected = reference_logits(weights, prompt)  # (T, V)
    storage = model.storage_for(8, 8)
    table = np.arange(8)
    for lo in range(0, prompt.size, chunk_tokens):
        part = prompt[lo : lo + chunk_tokens]
        logits = model.step(storage, [SeqSlice(0, part, lo, table, True)])
        assert logits.shape == (1, SMALL.vocab_size) and logits.dtype == np.float32
        assert relative_error(logits[0], expected[lo + part.size - 1]) < REL_TOL


def test_a_mixed_batch_of_chunks_and_decodes_on_shuffled_pages_matches_each_reference(
        model, weights):
    # Each step: (request, tokens this step); requests start at different steps, so prefill
    # chunks of one request share steps with decodes of others. Request 2 wants no logits.
    schedule = [[(0, 12), (1, 7)], [(0, 18), (1, 1), (2, 9)], [(0, 1), (1, 15), (2, 1)],
                [(0, 1), (2, 1), (3, 41)], [(3, 1), (1, 1), (0, 1), (2, 1)]]
    rng = np.random.default_rng(3)
    lengths = [sum(n for step in schedule for r, n in step if r == i) for i in range(4)]
    sequences = [rng.integers(0, SMALL.vocab_size, n) for n in lengths]
    expected = [reference_logits(weights, s) for s in sequences]
    pages = rng.permutation(64)  # every request's pages scattered through the pool
    tables = [pages[16 * i : 16 * (i + 1)] for i in range(4)]
    storage = model.storage_for(64, 4)
    done = [0, 0, 0, 0]
    for step in schedule:
        seqs = [SeqSlice(r, sequences[r][done[r] : done[r] + n], done[r], tables[r], r != 2)
                for r, n in step]
        logits = model.step(storage, seqs)
        wanted = [(r, n) for r, n in step if r != 2]
        assert logits.shape == (len(wanted), SMALL.vocab_size)
        for row, (r, n) in zip(logits, wanted, strict=True):
            assert relative_error(row, expected[r][done[r] + n - 1]) < REL_TOL
        for r, n in step:
            done[r] += n


def test_greedy_decoding_is_token_for_token_the_reference_greedy(model, weights, prompt):
    num_new = 24
    storage = model.storage_for(16, 8)
    table = np.random.default_rng(5).permutation(16)
    logits = prefill(model, storage, 0, prompt, table, chunk_tokens=16)
    tokens = greedy_decode(model, storage, 0, logits, prompt.size, num_new, table)
    np.testing.assert_array_equal(tokens, reference_greedy(weights, prompt, num_new))


def test_tied_embeddings_and_the_mha_case_match_the_reference(prompt):
    config = SMALL.__class__(**{**SMALL.__dict__, "num_kv_heads": 4, "tie_word_embeddings": True})
    weights = LlamaWeights.random(config, seed=1)
    model = LlamaModel(weights)
    storage = model.storage_for(10, 4)
    logits = prefill(model, storage, 0, prompt, np.arange(10), chunk_tokens=20)
    assert relative_error(logits, reference_logits(weights, prompt)[-1]) < REL_TOL


def test_a_step_without_wanted_logits_returns_no_rows_but_writes_the_pages(model, prompt):
    storage = model.storage_for(8, 8)
    assert model.step(storage, []).shape == (0, SMALL.vocab_size)
    out = model.step(storage, [SeqSlice(0, prompt, 0, np.arange(8), False)])
    assert out.shape == (0, SMALL.vocab_size)
    assert np.abs(storage.k[:, :5]).max() > 0


def _seq(**fields) -> SeqSlice:
    base = {"request_id": 0, "tokens": np.array([1, 2, 3]), "start": 0,
            "page_table": np.arange(4), "want_logits": True}
    return SeqSlice(**{**base, **fields})


@pytest.mark.parametrize(("fields", "field", "match"), [
    ({"tokens": np.array([1, 97])}, "seqs[0].tokens", "outside"),
    ({"tokens": np.array([-1])}, "seqs[0].tokens", "outside"),
    ({"tokens": np.array([], dtype=np.int64)}, "seqs[0].tokens", "non-empty"),
    ({"tokens": np.array([1.0])}, "seqs[0].tokens", "integer"),
    ({"start": 254}, "seqs[0].start", "max_context"),
    ({"start": -1}, "seqs[0].start", ">= 0"),
    ({"start": 2, "page_table": np.arange(1)}, "seqs[0].page_table", "too short"),
    ({"page_table": np.array([99, 0])}, "seqs[0].page_table", "outside"),
    ({"want_logits": 1}, "seqs[0].want_logits", "True or False"),
])
def test_a_bad_sequence_is_refused_naming_its_field(model, fields, field, match):
    storage = model.storage_for(8, 4)
    with pytest.raises(ModelInputError, match=match) as error:
        model.step(storage, [_seq(**fields)])
    assert error.value.field == field


def test_a_request_twice_in_a_step_or_storage_of_another_model_is_refused(model):
    with pytest.raises(ModelInputError, match="twice") as error:
        model.step(model.storage_for(8, 4), [_seq(), _seq()])
    assert error.value.field == "seqs[1].request_id"
    from refimpl.kv.storage import KVStorage

    other = KVStorage(3, 8, 4, SMALL.num_kv_heads, SMALL.head_dim)
    with pytest.raises(ModelInputError, match=r"storage\.num_layers"):
        model.step(other, [_seq()])


def test_huge_gate_activations_stay_finite_without_overflow_warnings(weights, prompt):
    import dataclasses
    import warnings

    layers = tuple(dataclasses.replace(layer, w_gate_up=layer.w_gate_up * np.float32(500))
                   for layer in weights.layers)  # gate values far below -88: exp overflows
    loud = dataclasses.replace(weights, layers=layers)
    model = LlamaModel(loud)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        logits = prefill(model, model.storage_for(10, 4), 0, prompt, np.arange(10))
        expected = reference_logits(loud, prompt)[-1]
    assert np.isfinite(logits).all()
    assert relative_error(logits, expected) < REL_TOL
