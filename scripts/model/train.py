#!/usr/bin/env python3
"""Trains the project's own needle model (issue 41 point 2): a small Llama-architecture model over
bytes (scripts/model/llama.py: head dim 128, GQA, RoPE) on generated text that plants code-word
facts in long filler and asks for one of them at the end, so that the model learns to retrieve;
then writes it as GGUF for kvflash-run. Fixed seed; the same command gives the same file on the
same machine and PyTorch.

Long contexts from short training windows: most steps skip the positions ahead at one random cut
(positional skip-wise training, PoSE: Zhu et al. 2023), so that the relative distances up to
--span tokens are all seen while each window stays --seq tokens; RoPE's base is 500000 (Llama 3's)
so that those distances stay distinct. At the end, the needle accuracy of the PyTorch model at a
few real depths (--eval-depths) is printed: the model kvflash-run then checks.

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
import needle_text  # noqa: E402
from needle_text import document  # noqa: E402

def batch(rng, n, seq, answer_weight, facts, questions, echo, drill=0.0):
    """n documents of seq + 1 bytes: inputs, targets and per-target loss weights (the answers'
    bytes weigh answer_weight, the rest 1); a `drill` share of them are induction drills
    (needle_text.induction_drill) instead."""
    xs, ws = [], []
    for _ in range(n):
        if rng.random() < drill:
            text, answers = needle_text.induction_drill(rng, seq + 1), []
        else:
            text, answers = document(rng, seq + 1, facts, questions, echo)
        b = list(text.encode("ascii"))[: seq + 1]
        b += [ord(" ")] * (seq + 1 - len(b))
        w = [1.0] * seq
        for answer in answers:
            for i in range(answer - 1, min(answer + 6, seq)):
                w[i] = answer_weight
        xs.append(b)
        ws.append(w)
    t = torch.tensor(xs, dtype=torch.long)
    return t[:, :-1], t[:, 1:], torch.tensor(ws)


def skip_positions(rng, seq, span, plain_share=0.25):
    """RoPE positions for one training window of seq tokens: 0..seq-1 for plain_share of the
    steps, else two runs, the second shifted ahead so that the last position is up to span - 1."""
    if span <= seq or rng.random() < plain_share:
        return torch.arange(seq)
    cut = rng.randint(1, seq - 1)
    shift = rng.randint(0, span - seq)
    pos = torch.arange(seq)
    pos[cut:] += shift
    return pos


@torch.no_grad()
def needle_accuracy(model, device, depths, needles, seed=7):
    """Greedy code-word retrieval of the PyTorch model, documents as scripts/model/check.py makes
    them: found / needles per depth."""
    rng = random.Random(seed)
    out = {}
    for d in depths:
        ok = 0
        for i in range(needles):
            prompt, code = needle_text.needle_prompt(rng, d, (i + 0.5) / needles)
            ids = list(prompt.encode("ascii"))
            for _ in range(len(code)):
                x = torch.tensor([ids], dtype=torch.long, device=device)
                with autocast(device):
                    ids.append(int(model(x)[0, -1].argmax()))
            ok += bytes(ids[-len(code):]).decode("ascii", "replace") == code
        out[d] = ok
    return out


def autocast(device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.startswith("cuda") else \
        torch.autocast("cpu", enabled=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="models/needle.gguf")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--seq", default="512,1024,2048",
                    help="window lengths in bytes, one drawn per step (the batch scaled so that "
                         "every step trains batch x the longest)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--answer-weight", type=float, default=8.0)
    ap.add_argument("--facts", type=int, default=4, help="code-word facts per document")
    ap.add_argument("--questions", type=int, default=4, help="of them asked at its end")
    ap.add_argument("--drill", type=float, default=0.5,
                    help="share of the documents that are induction drills (needle_text."
                         "induction_drill) during the first --drill-steps steps")
    ap.add_argument("--drill-steps", type=int, default=2000)
    ap.add_argument("--echo", type=float, default=0.3,
                    help="share of filler sentences with a tag repeated later (needle_text.filler)")
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--span", type=int, default=131072,
                    help="RoPE positions trained up to this (skip-wise); --seq for none")
    ap.add_argument("--rope-base", type=float, default=500000.0)
    ap.add_argument("--eval-depths", default="1024,4096,16384",
                    help="bytes; the PyTorch model's needle accuracy at the end ('' for none)")
    ap.add_argument("--eval-needles", type=int, default=10)
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="stop training early after this long (the file says so: not the model "
                         "the full command makes)")
    ap.add_argument("--stop-step", type=int, default=0,
                    help="stop after this step (the schedule still spans --steps): repeats a run "
                         "that --max-seconds stopped")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="a few steps on tiny shapes")
    a = ap.parse_args()
    if a.smoke:
        a.steps, a.seq, a.batch, a.eval_depths, a.eval_needles = 3, "128", 2, "256", 1
        a.facts, a.questions = 2, 1
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    seqs = [int(x) for x in a.seq.split(",")]
    longest = max(seqs)
    c = llama.Config(context=max(a.span, longest), rope_base=a.rope_base)
    model = llama.Llama(c).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=a.lr, total_steps=a.steps,
                                                pct_start=0.05)
    print(f"{llama.parameters(model) / 1e6:.2f} M parameters; {a.steps} steps of {a.batch} x "
          f"{a.seq} bytes on {a.device}, positions to {max(a.span, longest)}", flush=True)
    t0 = time.time()
    for step in range(1, a.steps + 1):
        seq = rng.choice(seqs)
        x, y, w = (t.to(a.device) for t in batch(rng, a.batch * longest // seq, seq, a.answer_weight,
                                                    a.facts, a.questions, a.echo,
                                                    a.drill if step <= a.drill_steps else 0.0))
        pos = skip_positions(rng, seq, a.span).to(a.device)
        with autocast(a.device):
            logits = model(x, pos)
        ce = F.cross_entropy(logits.float().reshape(-1, c.vocab), y.reshape(-1), reduction="none")
        loss = (ce * w.reshape(-1)).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        stop = bool(a.max_seconds and time.time() - t0 > a.max_seconds) or step == a.stop_step
        if step % 50 == 0 or step == a.steps or stop:
            answer = w.reshape(-1) > 1
            print(f"step {step}: loss {loss.item():.4f}, on the answers "
                  f"{(ce * answer).sum().item() / max(1, answer.sum().item()):.3f} "
                  f"({time.time() - t0:.0f} s)", flush=True)
        if stop:
            print(f"stopped after {step} of {a.steps} steps (the same model again: --stop-step "
                  f"{step})", flush=True)
            break
    model.eval()
    if a.eval_depths:
        depths = [int(d) for d in a.eval_depths.split(",")]
        t1 = time.time()
        found = needle_accuracy(model, a.device, depths, a.eval_needles)
        print("needles found (PyTorch, greedy): " +
              ", ".join(f"{found[d]}/{a.eval_needles} at {d}" for d in depths) +
              f" ({time.time() - t1:.0f} s)", flush=True)
    model = model.cpu()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    llama.export(model, a.out, matrices=gguf.GGML_F16, name="kvflash-needle")
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
