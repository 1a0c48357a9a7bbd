"""A toy decoder layer in PyTorch whose KV cache is kvflash's: a 64-token prompt, then 32 decode
steps, with the cache in f16 (the usual engine) and in kvflash's q8_0 and turbo3 (and any type
named on the command line), printing how far each layer output drifts from the f16 one.

    PYTHONPATH=build/ci/python /usr/bin/python3 examples/python/toy_decoder.py [q4_0 turbo4 ...]

Random weights and inputs (no model to download): the numbers show the attention error that a
KV type brings into one layer, not a model's quality (kvflash-quality and kvflash-run measure
that, README). CPU by default; --device cuda runs the same on the GPU.
"""

import argparse
import math

import torch

import kvflash

DIM, Q_HEADS, KV_HEADS, HEAD_DIM = 1024, 8, 2, 128


class ToyLayer(torch.nn.Module):
    """Pre-norm attention + MLP; no RoPE (positions do not matter to the KV error)."""

    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(DIM), torch.nn.LayerNorm(DIM)
        self.wq = torch.nn.Linear(DIM, Q_HEADS * HEAD_DIM, bias=False)
        self.wk = torch.nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wv = torch.nn.Linear(DIM, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = torch.nn.Linear(Q_HEADS * HEAD_DIM, DIM, bias=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(DIM, 4 * DIM), torch.nn.GELU(),
                                       torch.nn.Linear(4 * DIM, DIM))

    def forward(self, x, cache):
        """x (tokens, DIM) -> (tokens, DIM); the cache appends K/V and attends."""
        h = self.norm1(x)
        t = x.shape[0]
        q = self.wq(h).view(1, t, Q_HEADS, HEAD_DIM)
        k = self.wk(h).view(1, t, KV_HEADS, HEAD_DIM)
        v = self.wv(h).view(1, t, KV_HEADS, HEAD_DIM)
        attn = cache.attend(q, k, v)
        cache.outputs.append(attn[0])
        x = x + self.wo(attn.reshape(t, -1))
        return x + self.mlp(self.norm2(x))


class F16Cache:
    """What an engine keeps today: f16 K/V, attention in float32 (SDPA where torch has it)."""

    def __init__(self, capacity, device):
        shape = (1, capacity, KV_HEADS, HEAD_DIM)
        self.k = torch.zeros(shape, dtype=torch.float16, device=device)
        self.v = torch.zeros(shape, dtype=torch.float16, device=device)
        self.n = 0
        self.outputs = []  # attention's output per call, (tokens, heads, head_dim)

    def attend(self, q, k, v):
        t = q.shape[1]
        self.k[:, self.n:self.n + t], self.v[:, self.n:self.n + t] = k, v
        self.n += t
        group = Q_HEADS // KV_HEADS
        keys = self.k[0, :self.n].float().repeat_interleave(group, 1).transpose(0, 1)
        values = self.v[0, :self.n].float().repeat_interleave(group, 1).transpose(0, 1)
        queries = q[0].transpose(0, 1)  # (heads, t, d)
        pos_q = torch.arange(self.n - t, self.n, device=q.device)[:, None]
        visible = torch.arange(self.n, device=q.device)[None, :] <= pos_q  # causal
        sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
        if sdpa is not None:
            out = sdpa(queries, keys, values, attn_mask=visible)
        else:
            logits = queries @ keys.transpose(1, 2) / math.sqrt(HEAD_DIM)
            out = logits.masked_fill(~visible, -math.inf).softmax(-1) @ values
        return out.transpose(0, 1)[None]


class KvflashCache:
    """K/V rows quantized into kvflash's bytes as they arrive; attention by two plans planned
    once (prefill and decode) that read the bytes directly."""

    def __init__(self, kv_type, capacity, device):
        row = kvflash.row_size(kv_type, HEAD_DIM)
        self.kv_type = kv_type
        self.k = torch.zeros(1, capacity, KV_HEADS, row, dtype=torch.uint8, device=device)
        self.v = torch.zeros_like(self.k)
        self.lens = torch.zeros(1, dtype=torch.int64, device=device)
        self.plans = {}
        self.capacity, self.device = capacity, device
        self.outputs = []

    def plan(self, t):
        if t not in self.plans:
            self.plans[t] = kvflash.Plan(q_heads=Q_HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                                         kv_capacity=self.capacity, q_tokens=t,
                                         k_type=self.kv_type, v_type=self.kv_type,
                                         device=self.device)
        return self.plans[t]

    def attend(self, q, k, v):
        t, n = q.shape[1], int(self.lens[0])
        self.k[:, n:n + t] = kvflash.quantize(k.contiguous(), self.kv_type)
        self.v[:, n:n + t] = kvflash.quantize(v.contiguous(), self.kv_type)
        self.lens += t
        return self.plan(t).run(q.contiguous(), self.k, self.v, self.lens)


def run(layer, prompt, steps, cache):
    """The layer's and the attention's outputs for the prompt (one prefill call) and each decode
    step."""
    outs = [layer(prompt, cache)]
    for x in steps:
        outs.append(layer(x[None], cache))
    return torch.cat(outs), torch.cat(cache.outputs)


def relative_rms(got, want):
    return float((got - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("types", nargs="*", default=["q8_0", "turbo3"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    layer = ToyLayer().to(args.device)
    prompt = torch.randn(args.prompt, DIM, device=args.device)
    steps = torch.randn(args.steps, DIM, device=args.device)
    capacity = args.prompt + args.steps
    with torch.no_grad():
        want, want_attn = run(layer, prompt, steps, F16Cache(capacity, args.device))
        print(f"toy decoder layer: {args.prompt}-token prompt + {args.steps} decode steps, "
              f"{Q_HEADS}/{KV_HEADS} heads, head dim {HEAD_DIM}; difference from the f16 cache "
              "(the layer's output includes the residual stream, which dilutes it)")
        print("| KV type | bytes/token/layer | layer: max abs | layer: rel RMS | attention: "
              "rel RMS |")
        print("|---|---:|---:|---:|---:|")
        for kv_type in ["f16"] + args.types:
            got, attn = run(layer, prompt, steps, KvflashCache(kv_type, capacity, args.device))
            size = 2 * KV_HEADS * kvflash.row_size(kv_type, HEAD_DIM)
            print(f"| {kv_type} | {size} | {float((got - want).abs().max()):.2e} | "
                  f"{relative_rms(got, want):.2e} | {relative_rms(attn, want_attn):.2e} |")


if __name__ == "__main__":
    main()
