#!/usr/bin/env python3
"""The model-level checks of a KV cache type (issue 41 point 3), through kvflash-run:

- needle retrieval: documents of the training distribution (scripts/model/train.py) whose fact
  sits at spread depths of a D-byte context, then the question; the code word must come back
  exactly (greedy), N needles per depth;
- KL divergence of the next-token distributions against the f16 cache over one long generated
  text (mean and 99th percentile over tokens), and the top-1 agreement.

One table row per KV type (K = V), with its bits per value as kvflash-run reports them.

    scripts/model/check.py build/cpu/tools/run/kvflash-run models/needle.gguf \\
        [--types f16,q8_0,q4_0,turbo4,turbo3,turbo2] [--depths 1024,4096,16384,32768] \\
        [--needles 20] [--kld-bytes 8192] [--backend cuda --depths 1024,...,131072]

Plain Python (no NumPy): the logits files are read with the array module.
"""

import argparse
import array
import math
import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import needle_text  # noqa: E402  (the training text's generator; no PyTorch needed)


def _kvflash_run(binary, model, kv, text, n, flags):
    """kvflash-run on `text` given by file (one argument holds at most 128 KiB): stdout, stderr."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        cmd = [binary, "-m", model, *flags(f.name), "-n", str(n), "-ctk", kv, "-ctv", kv,
               "--no-progress"]
        r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:8])} ...: {r.stderr.strip()}")
    return r.stdout, r.stderr


def run(binary, model, kv, prompt, n, extra=()):
    out, err = _kvflash_run(binary, model, kv, prompt, n, lambda path: ("-f", path, *extra))
    return out.rstrip("\n"), err


def run_many(binary, model, kv, prompts, n, extra=()):
    """Every prompt in one kvflash-run (--prompts: NUL-separated, each on a fresh cache), so the
    model loads and the device starts once: the n-token generation of each, and stderr."""
    out, err = _kvflash_run(binary, model, kv, "".join(p + "\0" for p in prompts), n,
                            lambda path: ("--prompts", path, *extra))
    outs = out.split("\0")[:len(prompts)]
    if len(outs) != len(prompts):
        raise RuntimeError(f"{len(prompts)} prompts, {len(outs)} generations")
    return outs, err


def bits(stderr):
    m = re.search(r"\(([0-9.]+) / ([0-9.]+) bits per value\)", stderr)
    return float(m.group(1)) if m else float("nan")


def log_softmax(row):
    m = max(row)
    s = math.log(sum(math.exp(x - m) for x in row))
    return [x - m - s for x in row]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kvflash_run")
    ap.add_argument("model")
    ap.add_argument("--types", default="f16,q8_0,q4_0,turbo4,turbo3,turbo2")
    ap.add_argument("--depths", default="1024,4096,16384,32768")
    ap.add_argument("--needles", type=int, default=20)
    ap.add_argument("--kld-bytes", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", default="0")
    ap.add_argument("--backend", default="cpu", help="kvflash-run --backend: cpu or cuda")
    ap.add_argument("--chunk", default="512", help="kvflash-run -b: prompt tokens per prefill call")
    ap.add_argument("--require", type=float, default=None, metavar="FRACTION",
                    help="exit 1 unless f16 finds at least FRACTION of the needles at every depth "
                         "and q8_0 (if listed) finds as many as f16 (the CI check)")
    a = ap.parse_args()
    types = a.types.split(",")
    depths = [int(d) for d in a.depths.split(",")]
    extra = ("-t", a.threads, "--backend", a.backend, "-b", a.chunk)

    # The same prompts for every type.
    rng = random.Random(a.seed)
    needles = {d: [needle_text.needle_prompt(rng, d, (i + 0.5) / a.needles)
                   for i in range(a.needles)] for d in depths}
    kld_text, _ = needle_text.document(rng, a.kld_bytes)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ref_path = os.path.join(tmp, "f16.f32")
        run(a.kvflash_run, a.model, "f16", kld_text, 1, extra + ("--logits", ref_path))
        ref = array.array("f")
        with open(ref_path, "rb") as f:
            ref.frombytes(f.read())
        vocab = len(ref) // len(kld_text.encode())
        for kv in types:
            found = {}
            bpv = float("nan")
            # Every depth's needles in one run (greedy: the first len(code) tokens do not depend
            # on how many more are generated).
            asked = [pc for d in depths for pc in needles[d]]
            outs, err = run_many(a.kvflash_run, a.model, kv, [p for p, _ in asked],
                                 max(len(c) for _, c in asked), extra)
            bpv = bits(err)
            for i, d in enumerate(depths):
                part = zip(outs[i * a.needles:(i + 1) * a.needles],
                           asked[i * a.needles:(i + 1) * a.needles])
                found[d] = sum(out.startswith(code) for out, (_, code) in part)
            path = os.path.join(tmp, f"{kv}.f32")
            run(a.kvflash_run, a.model, kv, kld_text, 1, extra + ("--logits", path))
            got = array.array("f")
            with open(path, "rb") as f:
                got.frombytes(f.read())
            kls, agree = [], 0
            for t in range(len(ref) // vocab):
                p = log_softmax(ref[t * vocab:(t + 1) * vocab])
                q = log_softmax(got[t * vocab:(t + 1) * vocab])
                kls.append(sum(math.exp(pi) * (pi - qi) for pi, qi in zip(p, q)))
                agree += max(range(vocab), key=p.__getitem__) == max(range(vocab), key=q.__getitem__)
            kls.sort()
            rows.append((kv, bpv, found, sum(kls) / len(kls), kls[int(0.99 * (len(kls) - 1))],
                         agree / len(kls)))
            # The row so far on stderr too, so that a run stopped early keeps what it measured.
            print(f"{kv}: done: needles " + ", ".join(f"{found[d]}/{a.needles} @{d}" for d in depths)
                  + f"; KL mean {rows[-1][3]:.2e} p99 {rows[-1][4]:.2e} top-1 {rows[-1][5]:.4f}",
                  file=sys.stderr, flush=True)

    head = " | ".join(f"needle @{d}" for d in depths)
    print(f"| KV type | bits/value | {head} | KL mean | KL p99 | top-1 agree |")
    print("|---|---:|" + "---:|" * len(depths) + "---:|---:|---:|")
    for kv, bpv, found, kl_mean, kl_p99, agree in rows:
        cells = " | ".join(f"{found[d]}/{a.needles}" for d in depths)
        print(f"| {kv} | {bpv:.3f} | {cells} | {kl_mean:.2e} | {kl_p99:.2e} | {agree:.4f} |")
    if a.require is not None:
        found = {kv: f for kv, _, f, *_ in rows}
        fails = [f"f16 found {found['f16'][d]}/{a.needles} at {d}" for d in depths
                 if "f16" in found and found["f16"][d] < a.require * a.needles]
        fails += [f"q8_0 found {found['q8_0'][d]} at {d}, f16 {found['f16'][d]}" for d in depths
                  if "q8_0" in found and "f16" in found and found["q8_0"][d] < found["f16"][d]]
        for f in fails:
            print(f"FAIL: {f}", file=sys.stderr)
        return 1 if fails else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
