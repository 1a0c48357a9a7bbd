#!/usr/bin/env python3
"""Trains the project's own needle model (issue 41 point 2): a small Llama-architecture model over
bytes (scripts/model/llama.py: head dim 128, GQA, RoPE) on generated text that plants code-word
facts in long filler and asks for one of them at the end, so that the model learns to retrieve;
then writes it as GGUF for kvflash-run. Fixed seed; the same command gives the same file on the
same machine and PyTorch.

    scripts/model/train.py --out models/needle.gguf [--steps 4000 --seq 1024 --batch 16]
    scripts/model/train.py --smoke          # a few steps on tiny data: the pipeline works

Runs on the CPU (Debian's python3-torch is enough) or, with --device cuda, on a GPU.
"""

import argparse
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf  # noqa: E402
import llama  # noqa: E402
from needle_text import document  # noqa: E402

def batch(rng, n, seq, answer_weight):
    """n documents of seq + 1 bytes: inputs, targets and per-target loss weights (the answer's
    bytes weigh answer_weight, the rest 1)."""
    xs, ws = [], []
    for _ in range(n):
        text, answer = document(rng, seq + 1)
        b = list(text.encode("ascii"))[: seq + 1]
        b += [ord(" ")] * (seq + 1 - len(b))
        w = [1.0] * seq
        for i in range(answer - 1, min(answer + 6, seq)):
            w[i] = answer_weight
        xs.append(b)
        ws.append(w)
    t = torch.tensor(xs, dtype=torch.long)
    return t[:, :-1], t[:, 1:], torch.tensor(ws)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="models/needle.gguf")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--answer-weight", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="a few steps on tiny shapes")
    a = ap.parse_args()
    if a.smoke:
        a.steps, a.seq, a.batch = 3, 128, 2
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    c = llama.Config(context=a.seq)
    model = llama.Llama(c).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=a.steps,
                                                pct_start=0.05)
    print(f"{llama.parameters(model) / 1e6:.2f} M parameters; {a.steps} steps of {a.batch} x "
          f"{a.seq} bytes on {a.device}", flush=True)
    t0 = time.time()
    for step in range(1, a.steps + 1):
        x, y, w = (t.to(a.device) for t in batch(rng, a.batch, a.seq, a.answer_weight))
        logits = model(x)
        loss = (F.cross_entropy(logits.reshape(-1, c.vocab), y.reshape(-1), reduction="none")
                * w.reshape(-1)).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == a.steps:
            print(f"step {step}: loss {loss.item():.4f} ({time.time() - t0:.0f} s)", flush=True)
    model = model.cpu().eval()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    llama.export(model, a.out, matrices=gguf.GGML_F16, name="kvflash-needle")
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
