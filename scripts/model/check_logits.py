#!/usr/bin/env python3
"""kvflash-run's forward pass against PyTorch's (issue 41 point 4): a random Llama model of the
project's shape family (scripts/model/llama.py), written to GGUF with f32 matrices, run by
kvflash-run over an f32 cache in prefill chunks; the logits of every prompt token must match
PyTorch's on the same weights to NMSE <= 1e-6.

    scripts/model/check_logits.py build/cpu/tools/run/kvflash-run [--tokens 300] [--chunk 64]

Exit status 0 when it matches. Needs PyTorch (Debian: python3-torch).
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kvflash_run", help="the kvflash-run binary")
    ap.add_argument("--tokens", type=int, default=300, help="prompt tokens (default 300)")
    ap.add_argument("--chunk", type=int, default=64, help="prefill chunk (default 64)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bound", type=float, default=1e-6, help="NMSE bound (default 1e-6)")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    c = llama.Config(dim=256, layers=2, heads=2, kv_heads=1, head_dim=128, ffn=512, context=1024)
    model = llama.Llama(c).eval()
    with torch.no_grad():  # sharper than the default init, so that attention is not uniform
        for L in model.layers:
            L.wq.weight.mul_(4.0)
            L.wk.weight.mul_(4.0)
    ids = torch.randint(0, c.vocab, (1, a.tokens), generator=torch.Generator().manual_seed(a.seed))
    with torch.no_grad():
        want = model(ids)[0].double().numpy()

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "random.gguf")
        out = os.path.join(d, "logits.f32")
        llama.export(model, path, name="random")
        cmd = [a.kvflash_run, "-m", path, "--tokens", ",".join(str(int(x)) for x in ids[0]),
               "-n", "1", "-ctk", "f32", "-ctv", "f32", "-b", str(a.chunk), "--logits", out,
               "--no-progress"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        got = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(a.tokens, c.vocab)
    nmse = float(((got - want) ** 2).sum() / (want ** 2).sum())
    top1 = float((got.argmax(1) == want.argmax(1)).mean())
    ok = nmse <= a.bound
    print(f"kvflash-run vs PyTorch {torch.__version__}: {a.tokens} tokens in chunks of {a.chunk}, "
          f"logits NMSE {nmse:.3g} (bound {a.bound:g}), top-1 agreement {top1:.4f}: "
          f"{'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
