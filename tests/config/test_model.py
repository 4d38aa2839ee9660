"""ModelConfig: presets, the seed's KV formula against published figures, and validation."""

from __future__ import annotations

import dataclasses

import pytest

from refimpl import ModelConfig
from refimpl.config import MODEL_PRESETS
from refimpl.errors import ConfigError, RefimplError


@pytest.mark.parametrize(
    ("name", "bytes_per_token"),
    [
        ("llama-2-7b", 524_288),  # 2 * 32 layers * 32 heads * 128 * 2 bytes
        ("opt-13b", 819_200),  # the vLLM paper's "about 800 KB" per token
        ("llama-3-8b", 131_072),  # GQA: 8 KV heads
        ("llama-2-70b", 327_680),  # GQA: 8 KV heads over 80 layers
        ("llama-3.1-8b", 131_072),  # Llama 3 8B's shape
        ("qwen2.5-7b", 57_344),  # 2 * 28 layers * 4 KV heads * 128 * 2 bytes
    ],
)
def test_kv_bytes_per_token_matches_published_fp16_figures(name, bytes_per_token):
    model = ModelConfig.preset(name, kv_dtype="float16")
    assert model.kv_bytes_per_token() == bytes_per_token
    assert model.kv_bytes(4096) == 4096 * bytes_per_token


def test_kv_bytes_scale_with_dtype_width():
    fp16 = ModelConfig.preset("llama-2-7b", kv_dtype="float16")
    assert ModelConfig.preset("llama-2-7b", kv_dtype="int8").kv_bytes_per_token() * 2 == (
        fp16.kv_bytes_per_token()
    )
    assert ModelConfig.preset("llama-2-7b", kv_dtype="float32").kv_bytes(10) == (
        2 * fp16.kv_bytes(10)
    )


def test_parameter_counts_match_published_sizes():
    # Published sizes: Llama 2 7B is 6.74B, 70B is 68.98B; Llama 3 8B is 8.03B; Mistral 7B 7.24B.
    # Llama 3.1 8B is 8.03B, Qwen2.5 7B 7.61B (its model card; QKV biases and norms left out).
    expected = {"llama-2-7b": 6.74e9, "llama-2-70b": 68.98e9, "llama-3-8b": 8.03e9,
                "mistral-7b": 7.24e9, "llama-3.1-8b": 8.03e9, "qwen2.5-7b": 7.61e9}
    for name, count in expected.items():
        assert ModelConfig.preset(name).num_parameters() == pytest.approx(count, rel=0.01)


def test_every_preset_is_valid_and_named_after_its_key():
    for key, model in MODEL_PRESETS.items():
        assert model.name == key
        assert model.num_heads % model.num_kv_heads == 0
        assert model.num_heads * model.head_dim == model.hidden_size


def test_long_context_presets_have_their_published_shapes():
    """config.json of meta-llama/Llama-3.1-8B and Qwen/Qwen2.5-7B-Instruct on the Hub."""
    llama = ModelConfig.preset("llama-3.1-8b")
    assert (llama.num_layers, llama.num_heads, llama.num_kv_heads, llama.head_dim) == (
        32, 32, 8, 128)
    assert (llama.hidden_size, llama.intermediate_size, llama.vocab_size) == (
        4096, 14336, 128256)
    assert llama.max_context == 131_072 and llama.kv_dtype == llama.weight_dtype == "bfloat16"
    qwen = ModelConfig.preset("qwen2.5-7b")
    assert (qwen.num_layers, qwen.num_heads, qwen.num_kv_heads, qwen.head_dim) == (
        28, 28, 4, 128)
    assert (qwen.hidden_size, qwen.intermediate_size, qwen.vocab_size) == (
        3584, 18944, 152064)
    assert qwen.max_context == 32_768 and qwen.kv_dtype == qwen.weight_dtype == "bfloat16"
    assert ModelConfig.preset("qwen2.5-7b", max_context=131_072).max_context == 131_072  # YaRN


def test_tiny_preset_is_small_enough_to_run_on_the_cpu():
    tiny = ModelConfig.preset("tiny")
    assert tiny.num_parameters() < 50e6
    assert tiny.group_size > 1  # exercises the grouped-query path of the kernels


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ConfigError, match="'nope'") as info:
        ModelConfig.preset("nope")
    for name in MODEL_PRESETS:
        assert name in str(info.value)
    assert isinstance(info.value, RefimplError) and isinstance(info.value, ValueError)


def test_unknown_override_is_named():
    with pytest.raises(ConfigError, match="num_layer="):
        ModelConfig.preset("tiny", num_layer=3)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_layers", -1, r"num_layers=-1: must be at least 1"),
        ("num_heads", 0, r"num_heads=0: must be at least 1"),
        ("num_kv_heads", 0, r"num_kv_heads=0: must be at least 1"),
        ("head_dim", 64.0, r"head_dim=64.0: must be an integer"),
        ("num_layers", True, r"num_layers=True: must be an integer"),
        ("num_heads", 10, r"num_heads=10: must be a multiple of num_kv_heads=4"),
        ("kv_dtype", "float8", r"kv_dtype='float8': unknown dtype \(choose from: float32"),
        ("weight_dtype", None, r"weight_dtype=None: unknown dtype"),
    ],
)
def test_impossible_configs_name_the_field_and_value(field, value, message):
    base = dataclasses.asdict(ModelConfig.preset("tiny"))
    base.update(num_heads=8, num_kv_heads=4)
    base[field] = value
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**base)


def test_negative_token_count_is_rejected():
    with pytest.raises(ConfigError, match="num_tokens=-5"):
        ModelConfig.preset("tiny").kv_bytes(-5)


def test_configs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ModelConfig.preset("tiny").num_layers = 2  # type: ignore[misc]
