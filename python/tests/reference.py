"""Attention in torch float64 on dequantized K/V, written from problem.hpp's definition (the
logit rule, positions, hidden keys, sinks, the empty-state rule), independent of the library's
own reference. torch 1.13 has no scaled_dot_product_attention, and SDPA has no softcap, sinks or
windows: this is the oracle the tests hold every feature to."""

import math

import torch


def attention(q, k, v, kv_lens=None, causal=True, window=0, softcap=0.0, scale=None, sinks=None,
              alibi_slopes=None, mask=None):
    """q (batch, q_tokens, q_heads, dk); k, v (batch, capacity, kv_heads, d) values. Returns
    out (batch, q_tokens, q_heads, dv) and lse (batch, q_tokens, q_heads), float64."""
    q, k, v = (torch.as_tensor(x).double() for x in (q, k, v))
    b, t, h, dk = q.shape
    group = h // k.shape[2]
    scale = scale or 1.0 / math.sqrt(dk)
    out = torch.zeros(b, t, h, v.shape[-1], dtype=torch.float64)
    lse = torch.full((b, t, h), -math.inf, dtype=torch.float64)
    for s in range(b):
        n = int(kv_lens[s]) if kv_lens is not None else k.shape[1]
        ks = k[s, :n].repeat_interleave(group, dim=1)  # (n, h, dk)
        vs = v[s, :n].repeat_interleave(group, dim=1)
        logits = torch.einsum("thd,nhd->htn", q[s], ks) * scale
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        pq = (n - t + torch.arange(t)).double()[:, None]  # query positions (t, 1)
        pk = torch.arange(n).double()[None, :]
        if alibi_slopes is not None:
            logits = logits + torch.as_tensor(alibi_slopes).double()[:, None, None] * (pk - pq)
        if mask is not None:
            logits = logits + torch.as_tensor(mask).double()[s, :, :n][None]
        hidden = torch.zeros(t, n, dtype=torch.bool)
        if causal:
            hidden |= pk > pq
        if window:
            hidden |= (pq - pk) >= window
        logits = logits.masked_fill(hidden[None], -math.inf)
        full = logits
        if sinks is not None:
            sink = torch.as_tensor(sinks).double()[:, None, None].expand(h, t, 1)
            full = torch.cat([logits, sink], dim=-1)
        row_lse = torch.logsumexp(full, dim=-1)  # (h, t)
        empty = torch.isinf(row_lse) & (row_lse < 0)
        p = torch.exp(logits - torch.where(empty, torch.zeros_like(row_lse), row_lse)[..., None])
        p = torch.where(empty[..., None], torch.zeros_like(p), p)
        out[s] = torch.einsum("htn,nhd->thd", p, vs)
        lse[s] = row_lse.transpose(0, 1)
    return out, lse


def nmse(got, want):
    got, want = torch.as_tensor(got).double(), torch.as_tensor(want).double()
    return float(((got - want) ** 2).sum() / max(float((want ** 2).sum()), 1e-300))
