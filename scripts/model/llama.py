"""The Llama architecture in PyTorch, as kvflash-run runs it (tools/run/model.hpp), and its export
to GGUF with llama.cpp's tensor names and metadata keys.

RMSNorm; RoPE in llama.cpp's normal mode (pairs (2i, 2i + 1) rotated by pos * base^(-2i / d));
grouped-query attention, causal; SwiGLU MLP; an untied output matrix. Tokens are bytes for the
project's own models (tokenizer.ggml.model = "bytes", 256 tokens).
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

import gguf


@dataclass
class Config:
    vocab: int = 256
    dim: int = 256
    layers: int = 4
    heads: int = 2
    kv_heads: int = 1
    head_dim: int = 128
    ffn: int = 768
    rope_base: float = 10000.0
    eps: float = 1e-5
    context: int = 1024


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, positions, base):
    """x: (batch, tokens, heads, head_dim); pairs (2i, 2i + 1) rotated."""
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=positions.device) / d)
    theta = positions.to(torch.float64)[:, None] * inv[None, :]  # (tokens, d / 2)
    cos = torch.cos(theta).to(x.dtype)[None, :, None, :]
    sin = torch.sin(theta).to(x.dtype)[None, :, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


def causal_attention(q, k, v):
    """(batch, heads, tokens, head_dim) each; softmax(q k^T / sqrt(d)) v over keys <= the query.
    On a GPU through PyTorch's scaled_dot_product_attention (flash), else written out (Debian's
    PyTorch 1.13 has none, and the CPU check compares against this exact form)."""
    if q.is_cuda and hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.attn_norm = RMSNorm(c.dim, c.eps)
        self.wq = nn.Linear(c.dim, c.heads * c.head_dim, bias=False)
        self.wk = nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.wv = nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False)
        self.wo = nn.Linear(c.heads * c.head_dim, c.dim, bias=False)
        self.ffn_norm = RMSNorm(c.dim, c.eps)
        self.w_gate = nn.Linear(c.dim, c.ffn, bias=False)
        self.w_up = nn.Linear(c.dim, c.ffn, bias=False)
        self.w_down = nn.Linear(c.ffn, c.dim, bias=False)

    def forward(self, x, positions):
        c = self.c
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = rope(self.wq(h).view(b, t, c.heads, c.head_dim), positions, c.rope_base)
        k = rope(self.wk(h).view(b, t, c.kv_heads, c.head_dim), positions, c.rope_base)
        v = self.wv(h).view(b, t, c.kv_heads, c.head_dim)
        group = c.heads // c.kv_heads
        k = k.repeat_interleave(group, dim=2)
        v = v.repeat_interleave(group, dim=2)
        att = causal_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        x = x + self.wo(att.transpose(1, 2).reshape(b, t, c.heads * c.head_dim))
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embd = nn.Embedding(c.vocab, c.dim)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.out_norm = RMSNorm(c.dim, c.eps)
        self.output = nn.Linear(c.dim, c.vocab, bias=False)

    def forward(self, ids, positions=None):
        """ids (batch, tokens); positions (tokens,) for RoPE, 0.. by default (training may skip
        ahead, scripts/model/train.py)."""
        x = self.tok_embd(ids)
        if positions is None:
            positions = torch.arange(ids.shape[1], device=ids.device)
        for layer in self.layers:
            x = layer(x, positions)
        return self.output(self.out_norm(x))


def _tensor(name, weight, gtype):
    """A GGUF tensor entry: PyTorch's (out, in) is GGUF's dims [in, out] (ne[0] first)."""
    w = weight.detach().to(torch.float32).contiguous()
    dims = list(reversed(w.shape))
    if gtype == gguf.GGML_F32:
        data = w.numpy().tobytes()
    elif gtype == gguf.GGML_F16:
        data = w.to(torch.float16).numpy().tobytes()
    else:
        raise ValueError(f"export writes f32 or f16, not ggml type {gtype}")
    return (name, dims, gtype, data)


def export(model, path, matrices=gguf.GGML_F32, name="kvflash-needle"):
    """Writes the model as a llama GGUF: norms in f32, matrices in `matrices` (f32 or f16)."""
    c = model.c
    meta = [
        ("general.architecture", gguf.STRING, "llama"),
        ("general.name", gguf.STRING, name),
        ("llama.context_length", gguf.U32, c.context),
        ("llama.embedding_length", gguf.U32, c.dim),
        ("llama.block_count", gguf.U32, c.layers),
        ("llama.feed_forward_length", gguf.U32, c.ffn),
        ("llama.attention.head_count", gguf.U32, c.heads),
        ("llama.attention.head_count_kv", gguf.U32, c.kv_heads),
        ("llama.attention.key_length", gguf.U32, c.head_dim),
        ("llama.attention.value_length", gguf.U32, c.head_dim),
        ("llama.rope.dimension_count", gguf.U32, c.head_dim),
        ("llama.rope.freq_base", gguf.F32, c.rope_base),
        ("llama.attention.layer_norm_rms_epsilon", gguf.F32, c.eps),
        ("tokenizer.ggml.model", gguf.STRING, "bytes"),
    ]
    f32 = gguf.GGML_F32
    tensors = [_tensor("token_embd.weight", model.tok_embd.weight, matrices),
               _tensor("output_norm.weight", model.out_norm.weight, f32),
               _tensor("output.weight", model.output.weight, matrices)]
    for i, L in enumerate(model.layers):
        p = f"blk.{i}."
        tensors += [_tensor(p + "attn_norm.weight", L.attn_norm.weight, f32),
                    _tensor(p + "attn_q.weight", L.wq.weight, matrices),
                    _tensor(p + "attn_k.weight", L.wk.weight, matrices),
                    _tensor(p + "attn_v.weight", L.wv.weight, matrices),
                    _tensor(p + "attn_output.weight", L.wo.weight, matrices),
                    _tensor(p + "ffn_norm.weight", L.ffn_norm.weight, f32),
                    _tensor(p + "ffn_gate.weight", L.w_gate.weight, matrices),
                    _tensor(p + "ffn_up.weight", L.w_up.weight, matrices),
                    _tensor(p + "ffn_down.weight", L.w_down.weight, matrices)]
    gguf.write(path, meta, tensors)


def parameters(model):
    return sum(p.numel() for p in model.parameters())


if __name__ == "__main__":
    print(f"Config(): {parameters(Llama(Config())) / 1e6:.2f} M parameters")
