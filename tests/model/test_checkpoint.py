"""Hugging Face checkpoint folders: save -> load round trips, bad folders, HF cross-check."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from refimpl.errors import ConfigError, ModelInputError
from refimpl.model import LlamaModel, LlamaWeights, SeqSlice, reference_logits

from ._helpers import REL_TOL, SMALL, relative_error


def _logits(weights: LlamaWeights, prompt: np.ndarray) -> np.ndarray:
    model = LlamaModel(weights)
    storage = model.storage_for(10, 4)
    return model.step(storage, [SeqSlice(0, prompt, 0, np.arange(10), True)])


@pytest.mark.parametrize("tied", [False, True])
def test_save_then_load_gives_the_same_weights_and_identical_logits(tmp_path, prompt, tied):
    config = SMALL.__class__(**{**SMALL.__dict__, "tie_word_embeddings": tied})
    weights = LlamaWeights.random(config, seed=3)
    weights.save(tmp_path)
    stored = load_file(tmp_path / "model.safetensors")
    assert ("lm_head.weight" in stored) is not tied  # HF leaves a tied head out
    assert stored["model.layers.1.self_attn.k_proj.weight"].shape == (SMALL.kv_size,
                                                                      SMALL.hidden_size)
    loaded = LlamaWeights.load(tmp_path)
    assert loaded.config == config
    for name, tensor in weights.hf_tensors().items():
        np.testing.assert_array_equal(loaded.hf_tensors()[name], tensor, err_msg=name)
    np.testing.assert_array_equal(_logits(loaded, prompt), _logits(weights, prompt))


def test_a_bf16_checkpoint_widens_exactly_and_round_trips(tmp_path, weights, prompt):
    weights.save(tmp_path / "bf16", dtype="bfloat16")
    loaded = LlamaWeights.load(tmp_path / "bf16")
    for name, tensor in weights.hf_tensors().items():
        widened = loaded.hf_tensors()[name]
        assert (widened.view(np.uint32) & 0xFFFF == 0).all(), name  # bf16: low half is zero
        np.testing.assert_allclose(widened, tensor, rtol=2**-8, err_msg=name)
    loaded.save(tmp_path / "f32")
    np.testing.assert_array_equal(_logits(LlamaWeights.load(tmp_path / "f32"), prompt),
                                  _logits(loaded, prompt))


def test_tensors_split_over_several_files_and_f16_load(tmp_path, weights, prompt):
    weights.save(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    (tmp_path / "model.safetensors").unlink()
    names = sorted(tensors)
    save_file({n: tensors[n] for n in names[::2]}, tmp_path / "model-00001-of-00002.safetensors")
    save_file({n: tensors[n].astype(np.float16) for n in names[1::2]},
              tmp_path / "model-00002-of-00002.safetensors")
    loaded = LlamaWeights.load(tmp_path)
    assert relative_error(_logits(loaded, prompt), _logits(weights, prompt)) < 1e-2


def _broken(tmp_path, weights, change) -> None:
    weights.save(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    change(tensors)
    save_file(tensors, tmp_path / "model.safetensors")


@pytest.mark.parametrize(("change", "field", "match"), [
    (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), "model.layers.1.mlp.up_proj.weight",
     "missing"),
    (lambda t: t.update({"model.norm.weight": np.ones(3, np.float32)}), "model.norm.weight",
     r"wrong shape \(want \(64,\)\)"),
    (lambda t: t.update({"model.layers.0.self_attn.q_proj.bias": np.ones(64, np.float32)}),
     "model.layers.0.self_attn.q_proj.bias", "unexpected"),
    (lambda t: t.update({"model.norm.weight": np.ones(64, np.int32)}), "model.norm.weight",
     "unsupported tensor dtype"),
])
def test_a_bad_tensor_is_named_with_its_shape(tmp_path, weights, change, field, match):
    _broken(tmp_path, weights, change)
    with pytest.raises(ModelInputError, match=match) as error:
        LlamaWeights.load(tmp_path)
    assert error.value.field == field


def test_a_folder_without_config_or_tensors_or_with_an_unsupported_config_is_refused(
        tmp_path, weights):
    with pytest.raises(ModelInputError, match=r"config\.json"):
        LlamaWeights.load(tmp_path)
    weights.save(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(ModelInputError, match="no tensor files"):
        LlamaWeights.load(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="rope_scaling"):
        LlamaWeights.load(tmp_path)
    with pytest.raises(ModelInputError, match="dtype"):
        weights.save(tmp_path, dtype="int8")


def test_hugging_face_llama_gives_the_same_logits_on_the_saved_checkpoint(tmp_path, weights,
                                                                          prompt):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    weights.save(tmp_path)
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path, torch_dtype=torch.float32)
    hf.eval()
    with torch.no_grad():
        expected = hf(torch.tensor(prompt[None], dtype=torch.long)).logits[0].numpy()
    assert relative_error(reference_logits(weights, prompt), expected) < REL_TOL
    assert relative_error(_logits(weights, prompt)[0], expected[-1]) < REL_TOL
