"""The shape of a Llama-style decoder that refimpl runs for real, and its presets.

`LlamaConfig` holds what the forward pass needs (the Hugging Face `LlamaConfig` fields that a
plain Llama uses: no rope scaling, no biases, SwiGLU with SiLU). `from_hf_config` reads a
checkpoint's `config.json`; `to_model_config` gives the `ModelConfig` the simulator and the
cost model size, so the model that is served and the model that is planned for are one shape.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from numbers import Real

from refimpl.config import ModelConfig
from refimpl.config._validate import positive_int, positive_real
from refimpl.errors import ConfigError

__all__ = ["LLAMA_PRESETS", "LlamaConfig"]


@dataclass(frozen=True)
class LlamaConfig:
    """A Llama-style decoder's shape; validated on construction."""

    hidden_size: int  # model width
    num_layers: int  # transformer blocks
    num_heads: int  # query heads
    num_kv_heads: int  # key/value heads (fewer than num_heads: grouped-query attention)
    head_dim: int  # width of one head (even: RoPE rotates pairs)
    intermediate_size: int  # SwiGLU width
    vocab_size: int
    max_context: int  # positions the model accepts (HF max_position_embeddings)
    rope_theta: float = 10000.0  # RoPE base
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False  # the LM head reuses the input embedding
    name: str = "llama"

    def __post_init__(self) -> None:
        for field in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                      "intermediate_size", "vocab_size", "max_context"):
            positive_int(field, getattr(self, field))
        if self.num_heads % self.num_kv_heads:
            raise ConfigError("num_heads", self.num_heads,
                              f"must be a multiple of num_kv_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ConfigError("head_dim", self.head_dim, "must be even (RoPE rotates pairs)")
        positive_real("rope_theta", self.rope_theta)
        positive_real("rms_norm_eps", self.rms_norm_eps)
        if not isinstance(self.tie_word_embeddings, bool):
            raise ConfigError("tie_word_embeddings", self.tie_word_embeddings,
                              "must be True or False")

    @classmethod
    def preset(cls, name: str, **overrides: object) -> LlamaConfig:
        """The preset `name` (see `LLAMA_PRESETS`), with any fields overridden."""
        if name not in LLAMA_PRESETS:
            raise ConfigError("model", name, "unknown model preset", choices=LLAMA_PRESETS)
        fields = asdict(LLAMA_PRESETS[name])
        unknown = sorted(set(overrides) - set(fields))
        if unknown:
            raise ConfigError(unknown[0], overrides[unknown[0]], "not a LlamaConfig field",
                              choices=fields)
        return cls(**{**fields, **overrides})

    @property
    def q_size(self) -> int:
        """Width of all query heads together."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of all K (or V) heads together."""
        return self.num_kv_heads * self.head_dim

    def num_parameters(self) -> int:
        """Every weight, norms included, the embedding counted once when tied."""
        attention = self.hidden_size * (self.q_size + 2 * self.kv_size) + self.q_size * (
            self.hidden_size)
        mlp = 3 * self.hidden_size * self.intermediate_size
        norms = 2 * self.hidden_size
        heads = (1 if self.tie_word_embeddings else 2) * self.vocab_size * self.hidden_size
        return self.num_layers * (attention + mlp + norms) + self.hidden_size + heads

    def to_model_config(self) -> ModelConfig:
        """The same shape as the `ModelConfig` the simulator and cost model use (float32)."""
        return ModelConfig(
            name=self.name, num_layers=self.num_layers, num_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
            hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
            vocab_size=self.vocab_size, max_context=self.max_context, kv_dtype="float32",
            weight_dtype="float32", gated_mlp=True)

    @classmethod
    def from_hf_config(cls, config: dict) -> LlamaConfig:
        """The shape in a Hugging Face Llama `config.json` (already parsed into a dict)."""
        if not isinstance(config, dict):
            raise ConfigError("config", type(config).__name__, "must be a dict (config.json)")
        _check_plain_llama(config)
        for key in _HF_REQUIRED:
            if key not in config:
                raise ConfigError(key, None, "missing from config.json")
        num_heads = config["num_attention_heads"]
        hidden_size = config["hidden_size"]
        head_dim = config.get("head_dim")
        if head_dim is None:
            positive_int("num_attention_heads", num_heads)
            head_dim = hidden_size // num_heads
        return cls(
            hidden_size=hidden_size, num_layers=config["num_hidden_layers"],
            num_heads=num_heads, num_kv_heads=config.get("num_key_value_heads") or num_heads,
            head_dim=head_dim, intermediate_size=config["intermediate_size"],
            vocab_size=config["vocab_size"],
            max_context=config.get("max_position_embeddings", 2048),  # HF's defaults
            rope_theta=_real("rope_theta", config.get("rope_theta", 10000.0)),
            rms_norm_eps=_real("rms_norm_eps", config.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=config.get("tie_word_embeddings", False),
            name=str(config.get("_name_or_path") or "llama"))

    def to_hf_config(self) -> dict:
        """This shape as a Hugging Face `LlamaForCausalLM` `config.json` dict."""
        return {
            "_name_or_path": self.name, "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size, "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size, "max_position_embeddings": self.max_context,
            "rope_theta": self.rope_theta, "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings, "hidden_act": "silu",
            "attention_bias": False, "mlp_bias": False, "rope_scaling": None,
            "torch_dtype": "float32",
        }


_HF_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "vocab_size")


def _check_plain_llama(config: dict) -> None:
    """Refuse the Llama variants this forward pass does not compute (it would be silently
    wrong): another architecture, rope scaling (Llama 3.1's "llama3"), biases, another act."""
    model_type = config.get("model_type", "llama")
    if model_type != "llama":
        raise ConfigError("model_type", model_type, "only plain Llama checkpoints load",
                          choices=("llama",))
    if config.get("rope_scaling") is not None:
        raise ConfigError("rope_scaling", config["rope_scaling"], "rope scaling is not "
                          "implemented (only plain RoPE)")
    for key in ("attention_bias", "mlp_bias"):
        if config.get(key, False):
            raise ConfigError(key, config[key], "biases are not implemented")
    if config.get("hidden_act", "silu") != "silu":
        raise ConfigError("hidden_act", config["hidden_act"], "only SwiGLU with SiLU",
                          choices=("silu",))


def _real(field: str, value: object) -> float:
    """A finite number from JSON, as a float."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ConfigError(field, value, "must be a finite number")
    return float(value)


LLAMA_PRESETS: dict[str, LlamaConfig] = {
    # Ours: the `tiny` ModelConfig (refimpl/config/model.py) exactly, 15.5M parameters.
    "tiny": LlamaConfig(
        name="tiny", hidden_size=512, num_layers=4, num_heads=8, num_kv_heads=2, head_dim=64,
        intermediate_size=1408, vocab_size=4096, max_context=4096),
    # Karpathy's llama2.c "stories42M" (github.com/karpathy/llama2c README: dim 512, 8 layers,
    # 8 heads, context 1024; SwiGLU width 1376 from its model.py rule, 32,000-token Llama 2
    # vocabulary, tied embeddings): 41.7M parameters.
    "small": LlamaConfig(
        name="small", hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=8, head_dim=64,
        intermediate_size=1376, vocab_size=32000, max_context=1024, tie_word_embeddings=True),
    # MobileLLM-350M (Liu et al. 2024, "MobileLLM: Optimizing Sub-billion Parameter Language
    # Models for On-Device Use Cases", ICML): deep and thin, 32 layers of width 960, 15 query
    # and 5 KV heads, SwiGLU 2560, 32,000 tokens, shared embeddings, 2,048-token context;
    # SmolLM2-360M has the same blocks with a larger vocabulary. 345M parameters.
    "mobilellm-350m": LlamaConfig(
        name="mobilellm-350m", hidden_size=960, num_layers=32, num_heads=15, num_kv_heads=5,
        head_dim=64, intermediate_size=2560, vocab_size=32000, max_context=2048,
        tie_word_embeddings=True),
}
