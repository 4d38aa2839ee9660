"""A Llama-style decoder that runs on refimpl's own kernels and paged KV cache (issue #15).

`LlamaConfig` (shape and presets), `LlamaWeights` (float32 arrays; random, or a local Hugging
Face checkpoint folder), `reference_logits` (the plain NumPy oracle) and `LlamaModel.step`
(one engine step of many sequences over `KVStorage` pages); `warm_up_kernels` makes
every attention kernel's first call before serving. Importing `refimpl.model.config`
alone stays cheap; the forward pass imports the kernels (Numba) when first used.
"""

from refimpl._lazy import lazy_getattr
from refimpl.model.config import LLAMA_PRESETS, LlamaConfig

_LAZY = {
    "LlamaWeights": "refimpl.model.weights",
    "LayerWeights": "refimpl.model.weights",
    "reference_logits": "refimpl.model.reference",
    "LlamaModel": "refimpl.model.forward",
    "SeqSlice": "refimpl.model.plan",
    "warm_up_kernels": "refimpl.model.warm_up",
}

__all__ = ["LLAMA_PRESETS", "LlamaConfig", *_LAZY]

__getattr__ = lazy_getattr(__name__, _LAZY)
