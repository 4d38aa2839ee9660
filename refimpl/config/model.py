"""Transformer model shapes, and the seed's KV-cache size formula.

`ModelConfig` carries what the kernels, the cost model and the KV cache need to know about a
decoder-only model. The presets use published dimensions (sources beside each entry); `tiny`
is our own small Llama-style model that the CPU kernels run for real.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from refimpl.config._validate import positive_int
from refimpl.config.dtypes import dtype_bytes
from refimpl.errors import ConfigError

__all__ = ["MODEL_PRESETS", "ModelConfig"]


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer's shape; validated on construction."""

    name: str
    num_layers: int  # L: transformer blocks
    num_heads: int  # query heads
    num_kv_heads: int  # key/value heads (< num_heads means grouped-query attention)
    head_dim: int  # d: width of one head
    hidden_size: int  # model width (embedding size)
    intermediate_size: int  # MLP width
    vocab_size: int
    max_context: int  # longest prompt + output the model accepts, in tokens
    kv_dtype: str = "float16"  # element type of stored K and V
    weight_dtype: str = "float16"  # element type of the weights (for the cost model)
    gated_mlp: bool = True  # Llama-style SwiGLU (3 matrices) vs. OPT-style MLP (2 matrices)

    def __post_init__(self) -> None:
        for field in (
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "hidden_size",
            "intermediate_size",
            "vocab_size",
            "max_context",
        ):
            positive_int(field, getattr(self, field))
        if self.num_heads % self.num_kv_heads != 0:
            raise ConfigError(
                "num_heads",
                self.num_heads,
                f"must be a multiple of num_kv_heads={self.num_kv_heads}",
            )
        dtype_bytes(self.kv_dtype, "kv_dtype")
        dtype_bytes(self.weight_dtype, "weight_dtype")

    @classmethod
    def preset(cls, name: str, **overrides: object) -> ModelConfig:
        """The preset `name` (see `MODEL_PRESETS`), with any fields overridden."""
        if name not in MODEL_PRESETS:
            raise ConfigError("model", name, "unknown model preset", choices=MODEL_PRESETS)
        fields = asdict(MODEL_PRESETS[name])
        unknown = set(overrides) - set(fields)
        if unknown:
            bad = sorted(unknown)[0]
            raise ConfigError(bad, overrides[bad], "not a ModelConfig field", choices=fields)
        fields.update(overrides)
        return cls(**fields)

    @property
    def group_size(self) -> int:
        """Query heads per KV head (1 for multi-head attention)."""
        return self.num_heads // self.num_kv_heads

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes per stored K or V element."""
        return dtype_bytes(self.kv_dtype, "kv_dtype")

    def kv_bytes_per_token(self) -> int:
        """The seed's `2 * L * n_kv_heads * head_dim * bytes`: one token's K and V, all layers."""
        return (
            2  # one K and one V vector
            * self.num_layers  # per layer
            * self.num_kv_heads  # per KV head
            * self.head_dim  # elements per vector
            * self.kv_dtype_bytes  # bytes per element
        )

    def kv_bytes(self, num_tokens: int) -> int:
        """KV bytes of a request holding `num_tokens` tokens of context."""
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 0:
            raise ConfigError("num_tokens", num_tokens, "must be a whole number >= 0")
        return self.kv_bytes_per_token() * num_tokens

    def num_parameters(self) -> int:
        """Weights in the attention, MLP and embedding matrices (norms and biases left out)."""
        d_q = self.num_heads * self.head_dim
        d_kv = self.num_kv_heads * self.head_dim
        attention = self.hidden_size * (d_q + 2 * d_kv) + d_q * self.hidden_size
        mlp = (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size
        embeddings = 2 * self.vocab_size * self.hidden_size  # input embedding + output head
        return self.num_layers * (attention + mlp) + embeddings


def _preset(**fields: object) -> ModelConfig:
    return ModelConfig(**fields)  # type: ignore[arg-type]


# Published dimensions. Sources: each model's config.json on the Hugging Face Hub
# (meta-llama/Llama-2-7b-hf, meta-llama/Llama-2-70b-hf, meta-llama/Meta-Llama-3-8B,
# meta-llama/Llama-3.1-8B, Qwen/Qwen2.5-7B-Instruct, mistralai/Mistral-7B-v0.1,
# facebook/opt-13b) and the papers: Touvron et al. 2023 (Llama 2), Meta 2024 (Llama 3 and 3.1,
# "The Llama 3 Herd of Models"), Qwen Team 2024 (Qwen2.5 technical report), Jiang et al. 2023
# (Mistral 7B), Zhang et al. 2022 (OPT).
MODEL_PRESETS: dict[str, ModelConfig] = {
    # Ours: small enough that refimpl's CPU kernels generate a token in a few milliseconds,
    # with GQA (8 query heads share 2 KV heads) so every kernel path is exercised.
    "tiny": _preset(
        name="tiny", num_layers=4, num_heads=8, num_kv_heads=2, head_dim=64, hidden_size=512,
        intermediate_size=1408, vocab_size=4096, max_context=4096,
        kv_dtype="float32", weight_dtype="float32",
    ),
    "llama-2-7b": _preset(
        name="llama-2-7b", num_layers=32, num_heads=32, num_kv_heads=32, head_dim=128,
        hidden_size=4096, intermediate_size=11008, vocab_size=32000, max_context=4096,
    ),
    "llama-2-70b": _preset(
        name="llama-2-70b", num_layers=80, num_heads=64, num_kv_heads=8, head_dim=128,
        hidden_size=8192, intermediate_size=28672, vocab_size=32000, max_context=4096,
    ),
    "llama-3-8b": _preset(
        name="llama-3-8b", num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
        hidden_size=4096, intermediate_size=14336, vocab_size=128256, max_context=8192,
        kv_dtype="bfloat16", weight_dtype="bfloat16",
    ),
    # Llama 3.1 8B: Llama 3 8B's shape with a 128k context (max_position_embeddings 131072,
    # reached by Llama 3.1's RoPE scaling; refimpl only needs the limit).
    "llama-3.1-8b": _preset(
        name="llama-3.1-8b", num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
        hidden_size=4096, intermediate_size=14336, vocab_size=128256, max_context=131072,
        kv_dtype="bfloat16", weight_dtype="bfloat16",
    ),
    # Qwen2.5 7B (Instruct): its config.json's native 32,768 tokens. Qwen serves 131,072 with
    # YaRN rope scaling turned on; for that, `ModelConfig.preset("qwen2.5-7b",
    # max_context=131072)`. Its Q/K/V projections have biases (4,608 per layer, 129k in all,
    # 0.002% of 7.6B), which `num_parameters` leaves out like every norm.
    "qwen2.5-7b": _preset(
        name="qwen2.5-7b", num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128,
        hidden_size=3584, intermediate_size=18944, vocab_size=152064, max_context=32768,
        kv_dtype="bfloat16", weight_dtype="bfloat16",
    ),
    # Mistral 7B v0.1 uses a 4,096-token sliding window; refimpl attends to the whole context.
    "mistral-7b": _preset(
        name="mistral-7b", num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
        hidden_size=4096, intermediate_size=14336, vocab_size=32000, max_context=32768,
        kv_dtype="bfloat16", weight_dtype="bfloat16",
    ),
    "opt-13b": _preset(
        name="opt-13b", num_layers=40, num_heads=40, num_kv_heads=40, head_dim=128,
        hidden_size=5120, intermediate_size=20480, vocab_size=50272, max_context=2048,
        gated_mlp=False,
    ),
}
