"""A Llama decoder's weights as float32 NumPy arrays, and Hugging Face checkpoint folders.

Every matrix is stored (in, out), C-contiguous, so a layer is `x @ W` on a row batch `x`
(rows, in): the transpose of Hugging Face's `nn.Linear` (out, in). The Q, K and V projections
are fused into one matrix and the gate and up projections into another, so a layer makes four
GEMM calls instead of seven. A checkpoint is a folder with `config.json` and `*.safetensors`
files under HF's tensor names; bf16 and f16 tensors are widened to float32 on load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from refimpl.errors import ModelInputError
from refimpl.model.config import LlamaConfig

__all__ = ["LayerWeights", "LlamaWeights"]

_SAVE_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True, eq=False)
class LayerWeights:
    """One transformer block: pre-norms and the (in, out) matrices."""

    input_norm: np.ndarray  # (h,) RMSNorm weight before attention
    wqkv: np.ndarray  # (h, Hq*d + 2*Hkv*d): columns q, then k, then v
    wo: np.ndarray  # (Hq*d, h)
    post_norm: np.ndarray  # (h,) RMSNorm weight before the MLP
    w_gate_up: np.ndarray  # (h, 2*I): columns gate, then up
    w_down: np.ndarray  # (I, h)


@dataclass(frozen=True, eq=False)
class LlamaWeights:
    """All weights of a Llama decoder, float32, shapes checked against `config`."""

    config: LlamaConfig
    embed: np.ndarray  # (V, h)
    layers: tuple[LayerWeights, ...]
    final_norm: np.ndarray  # (h,)
    lm_head: np.ndarray  # (h, V); a view `embed.T` when the embeddings are tied

    def __post_init__(self) -> None:
        for name, shape in _shapes(self.config).items():
            _check(name, self._get(name), shape)

    def _get(self, name: str) -> np.ndarray:
        """The array behind one of `_shapes`' internal names ('layers.3.wo', 'embed')."""
        if name.startswith("layers."):
            _, index, attr = name.split(".")
            return getattr(self.layers[int(index)], attr)
        return getattr(self, name)

    @classmethod
    def random(cls, config: LlamaConfig, seed: int = 0) -> LlamaWeights:
        """Deterministic weights scaled so activations stay O(1): N(0, 1/fan_in) matrices,
        output projections shrunk by sqrt(2L) (GPT-2's residual rule), norms near 1."""
        rng = np.random.default_rng(seed)
        h, num_layers = config.hidden_size, config.num_layers

        def normal(shape: tuple[int, ...], fan_in: int, shrink: float = 1.0) -> np.ndarray:
            return rng.standard_normal(shape, dtype=np.float32) * np.float32(
                1.0 / (np.sqrt(fan_in) * shrink))

        def norm() -> np.ndarray:  # not all ones, so a norm weight applied wrongly shows
            return (1.0 + 0.1 * rng.standard_normal(h, dtype=np.float32)).astype(np.float32)

        residual = np.sqrt(2.0 * num_layers)
        layers = tuple(
            LayerWeights(
                input_norm=norm(),
                wqkv=normal((h, config.q_size + 2 * config.kv_size), h),
                wo=normal((config.q_size, h), config.q_size, residual),
                post_norm=norm(),
                w_gate_up=normal((h, 2 * config.intermediate_size), h),
                w_down=normal((config.intermediate_size, h), config.intermediate_size,
                              residual))
            for _ in range(num_layers))
        embed = normal((config.vocab_size, h), h)  # rows of norm ~1: tied logits stay O(1)
        lm_head = embed.T if config.tie_word_embeddings else normal((h, config.vocab_size), h)
        return cls(config, embed, layers, norm(), lm_head)

    # ---- Hugging Face checkpoint folders ---------------------------------------------------
    @classmethod
    def load(cls, folder: str | Path) -> LlamaWeights:
        """Read a local HF-format checkpoint folder: `config.json` and `*.safetensors`."""
        folder = Path(folder)
        config_path = folder / "config.json"
        if not config_path.is_file():
            raise ModelInputError("config.json", str(config_path), "not found")
        try:
            config = LlamaConfig.from_hf_config(json.loads(config_path.read_text()))
        except json.JSONDecodeError as error:
            raise ModelInputError("config.json", str(config_path), f"not JSON: {error}") from None
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise ModelInputError("*.safetensors", str(folder), "no tensor files in the folder")
        tensors: dict[str, np.ndarray] = {}
        for path in files:
            for name, tensor in _read_safetensors(path).items():
                if name in tensors:
                    raise ModelInputError(name, str(path), "tensor stored in two files")
                tensors[name] = tensor
        return cls._from_hf_tensors(config, tensors)

    @classmethod
    def _from_hf_tensors(cls, config: LlamaConfig, tensors: dict[str, np.ndarray]
                         ) -> LlamaWeights:
        """Transpose HF's (out, in) matrices and fuse them; check every name and shape."""
        expected = _hf_shapes(config)
        for name in tensors:
            # Old checkpoints store RoPE's inverse frequencies; tied ones may repeat lm_head.
            if name not in expected and not name.endswith("rotary_emb.inv_freq") and not (
                    name == "lm_head.weight" and config.tie_word_embeddings):
                raise ModelInputError(name, tensors[name].shape, "unexpected tensor (a variant "
                                      "this model does not compute?)")
        for name, shape in expected.items():
            if name not in tensors:
                raise ModelInputError(name, None, f"missing from the checkpoint (want {shape})")
            _check(name, tensors[name], shape)

        def linear(*names: str) -> np.ndarray:  # HF (out, in) matrices -> one (in, sum out)
            return np.ascontiguousarray(np.concatenate([tensors[n].T for n in names], axis=1))

        layers = []
        for i in range(config.num_layers):
            p = f"model.layers.{i}."
            layers.append(LayerWeights(
                input_norm=tensors[p + "input_layernorm.weight"],
                wqkv=linear(*(p + f"self_attn.{x}_proj.weight" for x in "qkv")),
                wo=linear(p + "self_attn.o_proj.weight"),
                post_norm=tensors[p + "post_attention_layernorm.weight"],
                w_gate_up=linear(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"),
                w_down=linear(p + "mlp.down_proj.weight")))
        embed = np.ascontiguousarray(tensors["model.embed_tokens.weight"])
        lm_head = embed.T if config.tie_word_embeddings else linear("lm_head.weight")
        return cls(config, embed, tuple(layers), tensors["model.norm.weight"], lm_head)

    def hf_tensors(self) -> dict[str, np.ndarray]:
        """The weights under HF's names and (out, in) layout, float32."""
        c = self.config
        out = {"model.embed_tokens.weight": self.embed, "model.norm.weight": self.final_norm}
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            q, k, v = np.split(layer.wqkv, [c.q_size, c.q_size + c.kv_size], axis=1)
            gate, up = np.split(layer.w_gate_up, 2, axis=1)
            out |= {p + "input_layernorm.weight": layer.input_norm,
                    p + "post_attention_layernorm.weight": layer.post_norm,
                    p + "self_attn.q_proj.weight": q.T, p + "self_attn.k_proj.weight": k.T,
                    p + "self_attn.v_proj.weight": v.T, p + "self_attn.o_proj.weight": layer.wo.T,
                    p + "mlp.gate_proj.weight": gate.T, p + "mlp.up_proj.weight": up.T,
                    p + "mlp.down_proj.weight": layer.w_down.T}
        if not c.tie_word_embeddings:  # HF leaves a tied head out of the file
            out["lm_head.weight"] = self.lm_head.T
        return out

    def save(self, folder: str | Path, dtype: str = "float32") -> None:
        """Write `config.json` and `model.safetensors` (tensors in `dtype`) into `folder`."""
        if dtype not in _SAVE_DTYPES:
            raise ModelInputError("dtype", dtype, "unknown checkpoint dtype", choices=_SAVE_DTYPES)
        from safetensors import TensorSpec, serialize_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        config = self.config.to_hf_config() | {"torch_dtype": dtype}
        (folder / "config.json").write_text(json.dumps(config, indent=2))
        arrays = {name: _encode(x, dtype) for name, x in self.hf_tensors().items()}
        # The specs point into `arrays`' buffers, which this frame keeps alive while writing.
        specs = {name: TensorSpec(dtype=dtype, shape=x.shape, data_ptr=x.ctypes.data,
                                  data_len=x.nbytes) for name, x in arrays.items()}
        # transformers refuses a file whose metadata does not name a framework it knows.
        serialize_file(specs, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Internal name -> shape of every array of `LlamaWeights`."""
    h, i_size = config.hidden_size, config.intermediate_size
    shapes = {"embed": (config.vocab_size, h), "final_norm": (h,),
              "lm_head": (h, config.vocab_size)}
    for i in range(config.num_layers):
        shapes |= {f"layers.{i}.input_norm": (h,), f"layers.{i}.post_norm": (h,),
                   f"layers.{i}.wqkv": (h, config.q_size + 2 * config.kv_size),
                   f"layers.{i}.wo": (config.q_size, h),
                   f"layers.{i}.w_gate_up": (h, 2 * i_size), f"layers.{i}.w_down": (i_size, h)}
    return shapes


def _hf_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> shape of every tensor a checkpoint of `config` must hold."""
    h, i_size = config.hidden_size, config.intermediate_size
    shapes = {"model.embed_tokens.weight": (config.vocab_size, h), "model.norm.weight": (h,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, h)
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (h,),
                   p + "post_attention_layernorm.weight": (h,),
                   p + "self_attn.q_proj.weight": (config.q_size, h),
                   p + "self_attn.k_proj.weight": (config.kv_size, h),
                   p + "self_attn.v_proj.weight": (config.kv_size, h),
                   p + "self_attn.o_proj.weight": (h, config.q_size),
                   p + "mlp.gate_proj.weight": (i_size, h), p + "mlp.up_proj.weight": (i_size, h),
                   p + "mlp.down_proj.weight": (h, i_size)}
    return shapes


def _check(name: str, x: object, shape: tuple[int, ...]) -> None:
    """`x` must be a float32 array of `shape`."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise ModelInputError(name, getattr(x, "dtype", type(x).__name__), "must be float32")
    if x.shape != shape:
        raise ModelInputError(name, x.shape, f"wrong shape (want {shape})")


_DECODE = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}  # safetensors is little-endian


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of one file as float32. safetensors' NumPy loader has no bfloat16 (NumPy
    lacks the type), so the raw bytes are read and bf16 is widened by hand."""
    from safetensors import SafetensorError, deserialize

    try:
        entries = deserialize(path.read_bytes())
    except SafetensorError as error:
        raise ModelInputError("safetensors file", str(path), f"unreadable: {error}") from None
    tensors = {}
    for name, entry in entries:
        kind, shape, data = entry["dtype"], tuple(entry["shape"]), entry["data"]
        if kind == "BF16":  # the top half of a float32: widen by shifting the bits up
            bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
            tensors[name] = bits.view(np.float32).reshape(shape)
        elif kind in _DECODE:  # F32 stays in its (writable) buffer: no copy
            values = np.frombuffer(data, dtype=_DECODE[kind])
            tensors[name] = values.astype(np.float32, copy=False).reshape(shape)
        else:
            raise ModelInputError(name, kind, "unsupported tensor dtype",
                                  choices=("F32", "F16", "BF16", "F64"))
    return tensors


def _encode(x: np.ndarray, dtype: str) -> np.ndarray:
    """`x` as contiguous little-endian storage of `dtype` (bf16 rounded to nearest even)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "float32":
        return x
    if dtype == "float16":
        return x.astype(np.float16)
    bits = x.view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))  # ties go to the even half
    return ((bits + rounding) >> 16).astype(np.uint16)
