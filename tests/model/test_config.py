"""LlamaConfig: presets, validation, Hugging Face config.json and the simulator's ModelConfig."""

from __future__ import annotations

import dataclasses

import pytest

from refimpl.config import ModelConfig
from refimpl.errors import ConfigError
from refimpl.model import LLAMA_PRESETS, LlamaConfig


@pytest.mark.parametrize(("name", "parameters"), [
    ("tiny", 15_471_104), ("small", 41_689_600), ("mobilellm-350m", 345_355_200)])
def test_presets_have_the_stated_parameter_counts(name, parameters):
    assert LlamaConfig.preset(name).num_parameters() == parameters


def test_tiny_is_the_simulators_tiny_model():
    assert LlamaConfig.preset("tiny").to_model_config() == ModelConfig.preset("tiny")


def test_every_preset_converts_to_a_float32_model_config_of_the_same_shape():
    for config in LLAMA_PRESETS.values():
        model = config.to_model_config()
        assert (model.kv_dtype, model.weight_dtype, model.gated_mlp) == ("float32", "float32",
                                                                        True)
        assert model.kv_bytes_per_token() == 2 * config.num_layers * config.kv_size * 4


def test_hf_config_round_trips_and_head_dim_defaults_to_width_over_heads():
    config = LlamaConfig.preset("mobilellm-350m", rope_theta=5e5)
    assert LlamaConfig.from_hf_config(config.to_hf_config()) == config
    hf = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 8,
          "intermediate_size": 512, "vocab_size": 1000}
    plain = LlamaConfig.from_hf_config(hf)
    assert (plain.head_dim, plain.num_kv_heads, plain.max_context) == (32, 8, 2048)
    assert (plain.rms_norm_eps, plain.tie_word_embeddings) == (1e-6, False)


@pytest.mark.parametrize(("change", "field"), [
    ({"vocab_size": None}, "vocab_size"),
    ({"model_type": "mistral"}, "model_type"),
    ({"rope_scaling": {"rope_type": "llama3"}}, "rope_scaling"),
    ({"attention_bias": True}, "attention_bias"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"rope_theta": "big"}, "rope_theta"),
    ({"num_key_value_heads": 3}, "num_heads"),
])
def test_an_hf_config_this_model_cannot_compute_is_refused_naming_the_field(change, field):
    hf = {**LlamaConfig.preset("tiny").to_hf_config(), **change}
    hf = {k: v for k, v in hf.items() if v is not None}
    with pytest.raises(ConfigError) as error:
        LlamaConfig.from_hf_config(hf)
    assert error.value.field == field


@pytest.mark.parametrize(("field", "value"), [
    ("head_dim", 15), ("num_kv_heads", 3), ("hidden_size", 0), ("rms_norm_eps", -1.0),
    ("tie_word_embeddings", 1)])
def test_an_impossible_shape_is_refused(field, value):
    with pytest.raises(ConfigError):
        dataclasses.replace(LlamaConfig.preset("tiny"), **{field: value})


def test_an_unknown_preset_or_field_is_refused():
    with pytest.raises(ConfigError, match="unknown model preset"):
        LlamaConfig.preset("gpt-5")
    with pytest.raises(ConfigError, match="not a LlamaConfig field"):
        LlamaConfig.preset("tiny", layers=3)
