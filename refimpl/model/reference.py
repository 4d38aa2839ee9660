"""The test oracle: a Llama forward pass over a whole sequence, plain NumPy, no KV cache.

It follows Hugging Face's `LlamaForCausalLM` (modeling_llama.py) step by step: RMSNorm,
RoPE with `rotate_half` (dimension i pairs with i + d/2), grouped-query causal attention through
a materialised softmax, SwiGLU MLP, final norm, LM head. It shares no code with the paged
forward (`refimpl.model.forward`) beyond the weights, so the two check each other.
"""

from __future__ import annotations

import numpy as np

from refimpl.model.weights import LlamaWeights

__all__ = ["reference_logits", "rope_angles"]


def rope_angles(positions: np.ndarray, head_dim: int, theta: float) -> np.ndarray:
    """(n, d/2) float64 rotation angles: position * theta^(-2i/d) (Su et al. 2021)."""
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)  # (d/2,)
    return np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]


def _rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return (x / np.sqrt(variance + np.float32(eps))) * weight


def _rope(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """HF's `x * cos + rotate_half(x) * sin` on x (T, H, d); angles (T, d/2)."""
    cos = np.concatenate([np.cos(angles)] * 2, axis=-1)[:, None, :].astype(np.float32)
    sin = np.concatenate([np.sin(angles)] * 2, axis=-1)[:, None, :].astype(np.float32)
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)  # rotate_half
    return x * cos + rotated * sin


def reference_logits(weights: LlamaWeights, tokens: np.ndarray) -> np.ndarray:
    """(T, vocab) float32 logits of every position of `tokens` (T,), computed from scratch."""
    c = weights.config
    tokens = np.asarray(tokens, dtype=np.int64)
    num_tokens = tokens.shape[0]
    group = c.num_heads // c.num_kv_heads
    angles = rope_angles(np.arange(num_tokens), c.head_dim, c.rope_theta)
    future = np.triu(np.ones((num_tokens, num_tokens), dtype=bool), k=1)  # key after query
    x = weights.embed[tokens]  # (T, h)
    for layer in weights.layers:
        qkv = _rms_norm(x, layer.input_norm, c.rms_norm_eps) @ layer.wqkv
        q, k, v = np.split(qkv, [c.q_size, c.q_size + c.kv_size], axis=1)
        q = _rope(q.reshape(num_tokens, c.num_heads, c.head_dim), angles)
        k = _rope(k.reshape(num_tokens, c.num_kv_heads, c.head_dim), angles)
        v = v.reshape(num_tokens, c.num_kv_heads, c.head_dim)
        k = np.repeat(k, group, axis=1)  # (T, Hq, d): query head j reads KV head j // group
        v = np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.float32(np.sqrt(c.head_dim))
        scores = np.where(future, -np.inf, scores)  # (Hq, T, T)
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        attended = np.einsum("hqk,khd->qhd", probs, v).reshape(num_tokens, c.q_size)
        x = x + attended @ layer.wo
        gate, up = np.split(_rms_norm(x, layer.post_norm, c.rms_norm_eps) @ layer.w_gate_up, 2,
                            axis=1)
        with np.errstate(over="ignore"):  # exp(-g) = inf for g < -88: SiLU is -0 there
            silu = gate / (1.0 + np.exp(-gate))
        x = x + (silu * up) @ layer.w_down
    return _rms_norm(x, weights.final_norm, c.rms_norm_eps) @ weights.lm_head
