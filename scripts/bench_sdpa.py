#!/usr/bin/env python3
"""bench_sdpa.py: the fair-peer baseline for kvflash-bench's CUDA decode numbers.

Times PyTorch's torch.nn.functional.scaled_dot_product_attention (SDPA) on the shapes
kvflash-bench measures (query heads / KV heads, head dims, depth = KV tokens, query tokens per
step), on the same GPU in the same session, one backend at a time, and writes CSV (read by
scripts/compare_sdpa.py next to kvflash-bench's CSV).

    python3 scripts/bench_sdpa.py --heads 32/8 --head-dim 128 -d 4096,32768,131072 -n 1,8 \
        -o bench_sdpa.csv
    python3 scripts/bench_sdpa.py -d 1024-1048576*2 --backends cudnn,flash,efficient,math
    python3 scripts/bench_sdpa.py --prefill -o bench_sdpa_prefill.csv
    python3 scripts/bench_sdpa.py --kvflash f16,q8_0,q4_0,turbo3 -d 4096,131072 -n 1,8
    python3 scripts/bench_sdpa.py --self-test    (parsing and flop counts, no torch; a CTest test)

--kvflash TYPES adds rows of kvflash through its Python package (backend "kvflash", dtype the KV
type, K = V) on the same points, the same tensors and the same timing: the caches are the SDPA
points' f16 K/V, quantized on the device by kvflash.quantize (f16 ones read as they are, as a
transposed view), q in float32; each timed call is a kvflash.Plan's run(..., out=out), which
allocates nothing. Their max_err is against the same float32 reference on the unquantized K/V,
so for quantized types it includes the quantization error and only f16/bf16/f32 are held to the
tolerance. The package must be importable (PYTHONPATH=BUILD/python).

Prefill (--prefill): the query-token / depth points are not a product of -n and -d but the list
--points N:DEPTH (default PREFILL_POINTS: fresh prompts of 8K and 32K tokens, n == depth, and
chunks of 2048 queries onto 8K, 32K and 128K caches), head dims 64, 128 and 256, the cuDNN,
flash and efficient backends, unless those flags are given. Prefill is compute-bound, so every
row also carries flops and tflops: 2 * (Dk + Dv) flops per visible (query, key) pair, per query
head, with the visible pairs counted under the bottom-right causal mask below (visible_pairs,
the same count as kvflash-bench's tools/bench/metrics.cpp), so the two tools' TFLOP/s compare.

Per point (backend, dtype, heads, head dims, depth, query tokens):
  * q (1, Hq, n, Dk), k (1, Hkv, depth, Dk), v (1, Hkv, depth, Dv) on cuda, torch.randn in the
    dtype (never zeros: some kernels shortcut zeros or the numbers would be meaningless).
  * The backend is forced with torch.nn.attention.sdpa_kernel(<one SDPBackend>); nothing falls
    back to another backend silently. A backend that cannot run a point gives a row with status
    "unsupported: <why>" (the reasons PyTorch warns about), never a crash; so does any other
    per-point failure (out of memory, ...): the sweep always finishes.
  * GQA (Hq > Hkv): first enable_gqa=True with the Hkv-head K/V (torch >= 2.5); if the backend
    rejects that, K/V are expanded to Hq heads with repeat_interleave (what a user of that backend
    would have to do). Column gqa: native, expanded, or mha (Hq == Hkv). kv_bytes and gbps always
    count the UNIQUE KV bytes (depth * Hkv * (Dk + Dv) * element size), as kvflash-bench does, so
    an expanded backend is charged for its extra traffic in time, not credited for it in GB/s.
  * Causal alignment. kvflash places the n query tokens at the END of the KV: query i (0-based)
    sees keys 0 .. depth-n+i (bottom-right aligned). SDPA's is_causal=True is top-left aligned
    (query i sees keys 0 .. i), which is wrong whenever n > 1 and depth > n. Therefore:
      - n == 1: is_causal=False, no mask (the single query sees every key; identical to causal);
      - n > 1, depth == n: is_causal=True (the two alignments coincide);
      - n > 1, depth > n: an explicit boolean attn_mask (1, 1, n, depth), True where visible,
        aligned bottom-right (column mask = "bool"). If the backend rejects masks (flash), the
        point is retried with torch.nn.attention.bias.causal_lower_right(n, depth) (column mask =
        "lower_right"), which PyTorch dispatches to its flash / efficient kernels' own
        bottom-right causal mode when they can take the inputs. If both are rejected the point is
        "unsupported". Either way the result is checked (below): a top-left alignment fails it
        (query 0 would see one key); a mask left out altogether changes only the last n-1 keys
        of some queries and can pass at long depths, so the mask column says what was used.
  * Correctness: the output of the first call is compared with a float32 reference (plain
    softmax(q k^T * scale + mask) v on the same rounded inputs, in chunks of queries so that a
    32K-token prompt's scores fit); max_err is max|out - ref| / max|ref|. Above the tolerance (f16 1e-2, bf16 4e-2, f32 1e-4) the status is "wrong: ..." and
    the exit code is 1. --no-check skips it.
  * L2 is not measured: enough independent (k, v) copies are kept that together they are at least
    --rotate-bytes (default 240 MiB, four times the H200's 60 MB L2, or 4x this GPU's L2 if
    larger), never fewer than 2; warm-up and timed call i use copy i % copies. The copies may take
    at most --max-bytes (default 16 GiB) and must fit the free GPU memory, or the point is a row
    "skipped: ...".
  * Timing: --warmup untimed calls, then -r timed calls, each between two torch.cuda.Event
    (enable_timing) records; median, min, max in microseconds. Before each timed call a short
    GPU spin (torch.cuda._sleep, where it exists) keeps the stream busy, so the events measure the
    GPU time of the SDPA call and not Python's dispatch latency (a decode call at 4K tokens runs
    for about as long as PyTorch takes to launch it). Without torch.cuda._sleep the header says
    so and short calls include launch latency.

CSV columns: backend, dtype, q_heads, kv_heads, head_dim_k, head_dim_v, depth, q_tokens, gqa,
us_median, us_min, us_max, kv_bytes, gbps (kv_bytes / median time, 1e9 B/s), status ("ok" or the
reason), then mask, copies, max_err, flops, tflops (flops / median time, 1e12 flop/s), kernel
(--kvflash rows: the kernel kvflash chose; SDPA rows: empty). A human-readable table and the torch / CUDA / cuDNN / GPU
versions go to stderr. Exit codes: 0 the sweep ran (unsupported / skipped rows included), 1 a
result was wrong, 2 a usage error, 3 no torch or no CUDA device.
"""

import argparse
import csv
import math
import os
import statistics
import sys
import time
import warnings

COLUMNS = ["backend", "dtype", "q_heads", "kv_heads", "head_dim_k", "head_dim_v", "depth",
           "q_tokens", "gqa", "us_median", "us_min", "us_max", "kv_bytes", "gbps", "status",
           "mask", "copies", "max_err", "flops", "tflops", "kernel"]
# --prefill's defaults: (query tokens, depth) points, head dims, backends.
PREFILL_POINTS = "8192:8192,32768:32768,2048:8192,2048:32768,2048:131072"
PREFILL_HEAD_DIMS = "64,128,256"
PREFILL_BACKENDS = "cudnn,flash,efficient"
# Bytes of float32 scores the reference check holds at once.
REFERENCE_SCORE_BYTES = 1 << 30
BACKENDS = ["cudnn", "flash", "efficient", "math"]
BACKEND_ENUM = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION",
                "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}
DTYPES = ["f16", "bf16", "f32"]
KVFLASH_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "turbo2", "turbo3", "turbo4"]
TOLERANCE = {"f16": 1e-2, "bf16": 4e-2, "f32": 1e-4}
MIB = 1 << 20
GIB = 1 << 30


# ---------------------------------------------------------------- argument parsing (no torch)

def _int_with_suffix(text):
    s = text.strip()
    mult = 1
    if s[-1:].lower() == "k":
        mult, s = 1024, s[:-1]
    elif s[-1:].lower() == "m":
        mult, s = 1024 * 1024, s[:-1]
    if not s.isdigit():
        raise ValueError(text)
    return int(s) * mult


def parse_int_list(flag, text):
    """Comma list of integers and ranges, as kvflash-bench: 4096,32768 or 1024-1048576*2
    (FIRST-LAST*FACTOR, FIRST-LAST+STEP; a bare FIRST-LAST doubles); suffixes K, M."""
    help_ = ("expected a comma list of positive integers (suffix K = 1024, M = 1024^2) or ranges "
             "FIRST-LAST*FACTOR / FIRST-LAST+STEP, e.g. 4096,32768 or 1024-1048576*2")
    out = []
    for item in [x for x in text.split(",") if x.strip()]:
        try:
            dash = item.find("-", 1)
            if dash < 0:
                v = _int_with_suffix(item)
                if v < 1:
                    raise ValueError
                out.append(v)
                continue
            first, rest = item[:dash], item[dash + 1:]
            op, step = "*", 2
            for c in "*+":
                if c in rest:
                    rest, step_s = rest.split(c, 1)
                    op, step = c, _int_with_suffix(step_s)
            a, b = _int_with_suffix(first), _int_with_suffix(rest)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag}: '{item}' is not valid; {help_}")
        if a < 1 or b < a or (op == "*" and step < 2) or (op == "+" and step < 1):
            raise argparse.ArgumentTypeError(
                f"{flag}: '{item}' is not valid; {help_} (factor >= 2, step >= 1)")
        v = a
        while v <= b:
            out.append(v)
            if len(out) > 100000:
                raise argparse.ArgumentTypeError(f"{flag}: '{item}' gives over 100000 values")
            v = v * step if op == "*" else v + step
    if not out:
        raise argparse.ArgumentTypeError(f"{flag}: '{text}' is not valid; {help_}")
    return out


def parse_pairs(text, flag, help_, valid):
    """Comma list of A or A/B (B defaults to A), each pair accepted by valid(a, b)."""
    out = []
    for item in [x for x in text.split(",") if x.strip()]:
        parts = item.split("/")
        try:
            a = int(parts[0])
            b = int(parts[1]) if len(parts) == 2 else a
            if len(parts) > 2 or not valid(a, b):
                raise ValueError
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag}: '{item}' is not valid; {help_}")
        out.append((a, b))
    if not out:
        raise argparse.ArgumentTypeError(f"{flag}: '{text}' is not valid; {help_}")
    return out


def parse_points(text):
    """Comma list of N:DEPTH (query tokens, KV tokens), each with 1 <= N <= DEPTH."""
    help_ = ("expected a comma list of QUERY_TOKENS:DEPTH with QUERY_TOKENS <= DEPTH, e.g. "
             "2048:131072,8192:8192 (suffixes K, M)")
    out = []
    for item in [x for x in text.split(",") if x.strip()]:
        try:
            n_text, d_text = item.split(":")
            n, depth = _int_with_suffix(n_text), _int_with_suffix(d_text)
            if not 1 <= n <= depth:
                raise ValueError
        except ValueError:
            raise argparse.ArgumentTypeError(f"--points: '{item}' is not valid; {help_}")
        out.append((n, depth))
    if not out:
        raise argparse.ArgumentTypeError(f"--points: '{text}' is not valid; {help_}")
    return out


def visible_pairs(n, depth, causal=True, window=0):
    """(query, key) pairs one head computes: query i sits at position depth - n + i; causal hides
    keys after it, a window > 0 keys window or more positions before it. The count of
    kvflash-bench (tools/bench/metrics.cpp visible_pairs), term by term."""
    pairs = 0
    for i in range(n):
        pq = depth - n + i
        last = min(pq, depth - 1) if causal else depth - 1
        first = max(0, pq - window + 1) if window > 0 else 0
        pairs += max(0, last - first + 1)
    return pairs


def attention_flops(hq, dk, dv, n, depth):
    """2 * (Dk + Dv) flops per visible pair (q.k and p.v, a multiply-add each), per query head;
    causal as this script runs every point with n > 1."""
    return 2 * (dk + dv) * hq * visible_pairs(n, depth, causal=n > 1)


def parse_heads(text):
    return parse_pairs(text, "--heads",
                       "expected QUERY_HEADS/KV_HEADS with KV_HEADS dividing QUERY_HEADS, e.g. 32/8,64/8",
                       lambda q, kv: q >= 1 and kv >= 1 and q % kv == 0)


def parse_head_dims(text):
    return parse_pairs(text, "--head-dim", "expected a head dim or DK/DV, e.g. 128 or 128,576/512",
                       lambda dk, dv: dk >= 1 and dv >= 1)


def parse_names(flag, allowed):
    def parse(text):
        out = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in out if x not in allowed]
        if bad or not out:
            raise argparse.ArgumentTypeError(
                f"{flag}: '{','.join(bad) or text}' is not valid; expected a comma list of "
                f"{', '.join(allowed)}")
        return list(dict.fromkeys(out))
    return parse


def parse_size(flag):
    def parse(text):
        s = text.strip().upper().removesuffix("IB").removesuffix("B")
        mult = {"K": 1 << 10, "M": MIB, "G": GIB, "T": 1 << 40}.get(s[-1:], 1)
        if mult != 1:
            s = s[:-1]
        try:
            v = float(s) * mult
        except ValueError:
            v = -1
        if v <= 0:
            raise argparse.ArgumentTypeError(
                f"{flag}: '{text}' is not valid; expected a size such as 240M or 16G")
        return int(v)
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench_sdpa.py",
        description="Time torch.nn.functional.scaled_dot_product_attention on kvflash-bench's "
                    "shapes (the fair-peer baseline), one SDPA backend at a time; CSV out.",
        epilog="Lists take commas and may be repeated; -d also takes ranges FIRST-LAST*FACTOR "
               "(1024-1048576*2) and FIRST-LAST+STEP. See the header of this file for the "
               "method (GQA, causal alignment, L2 rotation, timing, correctness check).")
    p.add_argument("--heads", action="append", default=None,
                   help="query heads / KV heads, e.g. 32/8 (default 32/8)")
    p.add_argument("--head-dim", action="append", default=None,
                   help="head dim or DK/DV, e.g. 128 or 576/512 (default 128)")
    p.add_argument("-d", "--depths", "--depth", dest="depths", action="append", default=None,
                   help="KV tokens: comma list and ranges (default 4096,32768)")
    p.add_argument("-n", "--n-query", dest="n_query", action="append", default=None,
                   help="query tokens per step: 1 decode, 2..8 speculative (default 1)")
    p.add_argument("--points", action="append", default=None,
                   help="QUERY_TOKENS:DEPTH points instead of the -n x -d product, e.g. "
                        "2048:131072,8192:8192 (default with --prefill: " + PREFILL_POINTS + ")")
    p.add_argument("--prefill", action="store_true",
                   help="prefill shapes: --points " + PREFILL_POINTS + ", --head-dim "
                        + PREFILL_HEAD_DIMS + ", --backends " + PREFILL_BACKENDS
                        + " unless given")
    p.add_argument("--dtypes", action="append", default=None,
                   help="f16, bf16, f32 (default f16,bf16)")
    p.add_argument("--backends", action="append", default=None,
                   help="cudnn, flash, efficient, math (default cudnn,flash)")
    p.add_argument("-r", "--repetitions", type=int, default=20, help="timed calls (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5)")
    p.add_argument("-o", "--output", default="-", help="CSV file (default stdout)")
    p.add_argument("--rotate-bytes", type=parse_size("--rotate-bytes"), default=240 * MIB,
                   help="least total size of the rotated K/V copies (default 240M)")
    p.add_argument("--max-bytes", type=parse_size("--max-bytes"), default=16 * GIB,
                   help="most GPU memory the K/V copies of one point may take (default 16G)")
    p.add_argument("--no-check", action="store_true",
                   help="skip the float32 reference check of each point's output")
    p.add_argument("--seed", type=int, default=42, help="seed of the random inputs (default 42)")
    p.add_argument("--kvflash", action="append", default=None,
                   help="also kvflash through its Python package, these KV types (K = V), "
                        "e.g. f16,q8_0,q4_0,turbo3")
    a = p.parse_args(argv)

    def joined(values, default):
        return ",".join(values) if values else default
    if a.prefill and (a.depths or a.n_query):
        p.error("--prefill takes its points from --points N:DEPTH, not from -n / -d")
    if a.points and (a.depths or a.n_query):
        p.error("--points replaces -n and -d: give one or the other")
    try:
        a.heads = parse_heads(joined(a.heads, "32/8"))
        a.head_dim = parse_head_dims(joined(a.head_dim, PREFILL_HEAD_DIMS if a.prefill
                                            else "128"))
        a.dtypes = parse_names("--dtypes", DTYPES)(joined(a.dtypes, "f16,bf16"))
        a.backends = parse_names("--backends", BACKENDS)(
            joined(a.backends, PREFILL_BACKENDS if a.prefill else "cudnn,flash"))
        a.kvflash = parse_names("--kvflash", KVFLASH_TYPES)(joined(a.kvflash, "")) \
            if a.kvflash else []
        if a.points or a.prefill:
            a.points = parse_points(joined(a.points, PREFILL_POINTS))
        else:
            depths = parse_int_list("-d", joined(a.depths, "4096,32768"))
            n_query = parse_int_list("-n", joined(a.n_query, "1"))
            a.points = [(n, d) for n in n_query for d in depths]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if a.repetitions < 1 or a.warmup < 0:
        p.error("-r must be >= 1 and --warmup >= 0")
    return a


# ---------------------------------------------------------------- helpers

def fmt_us(v):
    return "-" if v is None else (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def fmt_bytes(b):
    return f"{b / GIB:.2f} GiB" if b >= GIB else f"{b / MIB:.0f} MiB"


def short_reason(exc=None, caught=()):
    """One line: PyTorch's own reasons (the warnings it emits when a backend cannot run), or the
    exception text."""
    lines = []
    for w in caught:
        msg = str(w.message).split("(Triggered internally")[0].strip()
        for part in msg.splitlines():
            part = " ".join(part.split())
            if part and part not in lines and not any(x in part for x in NOISE):
                lines.append(part)
    if not lines and exc is not None:
        text = str(exc).strip().splitlines()
        lines.append(f"{type(exc).__name__}: {text[0] if text else ''}".strip())
    return "; ".join(lines) or "rejected"


def join_reasons(reasons, limit=400):
    """The distinct reasons of every rejected attempt, in order, in at most limit characters."""
    out = []
    for r in reasons:
        for part in r.split("; "):
            if part not in out:
                out.append(part)
    text = "; ".join(out) or "rejected"
    return text if len(text) <= limit else text[:limit - 3] + "..."


# Warnings that only say which backends we disabled ourselves; the reasons are the other lines.
NOISE = ("kernel not used because", "has been runtime disabled", "No available kernel")


class Unsupported(Exception):
    pass


class Skipped(Exception):
    pass


# ---------------------------------------------------------------- the benchmark

class Bench:
    def __init__(self, torch, args):
        self.torch = torch
        self.F = torch.nn.functional
        self.args = args
        self.missing = []
        self.sdpa_kernel = None
        self.backend_obj = {}
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            self.sdpa_kernel = sdpa_kernel
            for name, member in BACKEND_ENUM.items():
                if hasattr(SDPBackend, member):
                    self.backend_obj[name] = getattr(SDPBackend, member)
                else:
                    self.missing.append(f"SDPBackend.{member} (backend {name})")
        except ImportError:
            self.missing.append("torch.nn.attention.sdpa_kernel (torch >= 2.3); using "
                                "torch.backends.cuda.sdp_kernel, no cuDNN backend")
        try:
            from torch.nn.attention.bias import causal_lower_right
            self.causal_lower_right = causal_lower_right
        except ImportError:
            self.causal_lower_right = None
            self.missing.append("torch.nn.attention.bias.causal_lower_right (n > 1 without masks)")
        self.sleep = getattr(torch.cuda, "_sleep", None)
        if self.sleep is None:
            self.missing.append("torch.cuda._sleep: short calls include launch latency")
        # torch < 1.13 has no OutOfMemoryError class: then no exception matches this one.
        self.oom = getattr(torch.cuda, "OutOfMemoryError", type("NoOomClass", (Exception,), {}))
        self.enable_gqa_ok = True  # cleared on a TypeError (torch < 2.5)
        props = torch.cuda.get_device_properties(0)
        self.l2 = getattr(props, "L2_cache_size", 0) or 0
        self.rotate = max(args.rotate_bytes, 4 * self.l2)
        self.dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(args.seed)

    def header(self):
        t = self.torch
        p = t.cuda.get_device_properties(0)
        cudnn = t.backends.cudnn.version() if t.backends.cudnn.is_available() else None
        lines = [
            f"bench_sdpa: torch {t.__version__} · CUDA {t.version.cuda} · cuDNN {cudnn} · "
            f"{p.name} (sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
            f"{p.total_memory / GIB:.0f} GiB, L2 {self.l2 / MIB:.0f} MiB) · python "
            f"{sys.version.split()[0]}",
            f"K/V copies rotated past {fmt_bytes(self.rotate)} (cap {fmt_bytes(self.args.max_bytes)}"
            f"); {self.args.warmup} warm-up + {self.args.repetitions} timed calls, event-timed"
            f"{' after a GPU spin' if self.sleep else ''}, median (min-max) µs; seed "
            f"{self.args.seed}",
        ]
        if self.missing:
            lines.append("missing in this torch: " + "; ".join(self.missing))
        return "\n".join(lines)

    def warm_up_gpu(self, seconds=0.5):
        """Bring the GPU out of its idle clocks before the first point is timed."""
        t = self.torch
        a = t.randn((4096, 4096), device="cuda", dtype=t.float16, generator=self.gen)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(10):
                a @ a
            t.cuda.synchronize()
        del a
        t.cuda.empty_cache()

    def kernel_ctx(self, backend):
        t = self.torch
        if self.sdpa_kernel is not None:
            if backend not in self.backend_obj:
                raise Unsupported(f"torch {t.__version__} has no SDPBackend."
                                  f"{BACKEND_ENUM[backend]}")
            return self.sdpa_kernel(self.backend_obj[backend])
        if backend == "cudnn" or not hasattr(t.backends.cuda, "sdp_kernel"):
            raise Unsupported(f"torch {t.__version__} cannot select the {backend} backend")
        return t.backends.cuda.sdp_kernel(enable_flash=backend == "flash",
                                          enable_mem_efficient=backend == "efficient",
                                          enable_math=backend == "math")

    def randn(self, shape, dtype):
        return self.torch.randn(shape, device="cuda", dtype=dtype, generator=self.gen)

    def make_kv(self, hkv, depth, dk, dv, dtype, expand):
        k = self.randn((1, hkv, depth, dk), dtype)
        v = self.randn((1, hkv, depth, dv), dtype)
        if expand > 1:
            k2, v2 = k.repeat_interleave(expand, dim=1), v.repeat_interleave(expand, dim=1)
            del k, v
            k, v = k2, v2
        return k, v

    def call(self, q, k, v, how):
        """One SDPA call in the given form: how = (gqa, mask_kind, mask_obj)."""
        gqa, kind, mask = how
        kw = {}
        if gqa == "native":
            kw["enable_gqa"] = True
        if kind in ("bool", "lower_right"):
            return self.F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
        return self.F.scaled_dot_product_attention(q, k, v, is_causal=kind == "causal", **kw)

    def try_call(self, q, k, v, how):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = self.call(q, k, v, how)
                self.torch.cuda.synchronize()
                return out, None
            except TypeError as e:  # enable_gqa unknown: torch < 2.5
                if "enable_gqa" in str(e):
                    self.enable_gqa_ok = False
                    return None, f"torch {self.torch.__version__} has no enable_gqa"
                raise
            except RuntimeError as e:
                if isinstance(e, self.oom):
                    raise
                return None, short_reason(e, caught)

    def mask_forms(self, n, depth):
        """The ways to express bottom-right causal attention for n queries at the KV's end."""
        if n == 1:
            return [("none", None)]
        if n == depth:
            return [("causal", None)]
        rows = self.torch.arange(n, device="cuda").view(n, 1)
        cols = self.torch.arange(depth, device="cuda").view(1, depth)
        forms = [("bool", (cols <= rows + (depth - n)).view(1, 1, n, depth))]
        if self.causal_lower_right is not None:
            forms.append(("lower_right", self.causal_lower_right(n, depth)))
        return forms

    def reference_error(self, q, k, v, out, n, depth, hq, hkv):
        """max|out - ref| / max|ref| against float32 attention on the same (rounded) inputs."""
        t = self.torch
        g = hq // hkv
        if k.shape[1] == hq and g > 1:  # expanded copies: the unique heads
            k, v = k[:, ::g], v[:, ::g]
        dk = q.shape[-1]
        kf, vf = k[0].float(), v[0].float()
        # Queries in chunks whose float32 scores (hq x chunk x depth) fit REFERENCE_SCORE_BYTES.
        chunk = max(1, min(n, REFERENCE_SCORE_BYTES // (4 * hq * depth)))
        err, top = 0.0, 0.0
        for i0 in range(0, n, chunk):
            c = min(chunk, n - i0)
            qf = q[0, :, i0:i0 + c].float().reshape(hkv, g * c, dk)
            s = t.matmul(qf, kf.transpose(1, 2)) * (1.0 / math.sqrt(dk))
            s = s.view(hkv, g, c, depth)
            if n > 1:
                rows = t.arange(i0, i0 + c, device="cuda").view(c, 1)
                cols = t.arange(depth, device="cuda").view(1, depth)
                s = s.masked_fill(~(cols <= rows + (depth - n)), float("-inf"))
            ref = t.matmul(t.softmax(s, dim=-1).view(hkv, g * c, depth), vf).view(hq, c, -1)
            del s
            err = max(err, (out[0, :, i0:i0 + c].float() - ref).abs().max().item())
            top = max(top, ref.abs().max().item())
        return err / max(top, 1e-30)

    def kv_bytes(self, backend, dtype_name, hkv, dk, dv, depth):
        """The unique KV bytes of a point: SDPA's float tensors, or kvflash's rows of its type."""
        if backend == "kvflash":
            kvf = self.kvflash
            return depth * hkv * (kvf.row_size(dtype_name, dk) + kvf.row_size(dtype_name, dv))
        esize = self.torch.tensor([], dtype=self.dtype[dtype_name]).element_size()
        return depth * hkv * (dk + dv) * esize

    def empty_row(self, backend, dtype_name, hq, hkv, dk, dv, depth, n, status=""):
        """A point's CSV row before it is measured (every column; status as given)."""
        return {"backend": backend, "dtype": dtype_name, "q_heads": hq, "kv_heads": hkv,
                "head_dim_k": dk, "head_dim_v": dv, "depth": depth, "q_tokens": n, "gqa": "",
                "us_median": "", "us_min": "", "us_max": "",
                "kv_bytes": self.kv_bytes(backend, dtype_name, hkv, dk, dv, depth), "gbps": "",
                "status": status, "mask": "", "copies": "", "max_err": "",
                "flops": attention_flops(hq, dk, dv, n, depth), "tflops": "", "kernel": ""}

    def point(self, backend, dtype_name, hq, hkv, dk, dv, depth, n):
        t = self.torch
        args = self.args
        dtype = self.dtype[dtype_name]
        row = self.empty_row(backend, dtype_name, hq, hkv, dk, dv, depth, n)
        kv_bytes = row["kv_bytes"]
        if n > depth:
            row["status"] = (f"skipped: {n} query tokens are the last of the depth's tokens, "
                             f"so the depth must be at least {n}")
            return row
        ctx = self.kernel_ctx(backend)  # raises Unsupported for a backend this torch lacks
        g = hq // hkv
        gqa_modes = ["mha"] if g == 1 else (["native", "expanded"] if self.enable_gqa_ok
                                             else ["expanded"])
        free, _ = t.cuda.mem_get_info()
        copies = []
        try:
            with ctx:
                q = self.randn((1, hq, n, dk), dtype)
                forms = self.mask_forms(n, depth)
                # Find the first (gqa, mask) form this backend accepts, on copy 0.
                chosen, out, reasons = None, None, []
                for gqa in gqa_modes:
                    per_copy = kv_bytes * (g if gqa == "expanded" else 1)
                    if per_copy > args.max_bytes or per_copy > 0.8 * free:
                        reasons.append(f"skipped: the {gqa} K/V take {fmt_bytes(per_copy)}, "
                                       f"over --max-bytes or the free GPU memory")
                        continue
                    copies = [self.make_kv(hkv, depth, dk, dv, dtype, g if gqa == "expanded"
                                           else 1)]
                    for kind, mask in forms:
                        how = (gqa, kind, mask)
                        out, why = self.try_call(q, copies[0][0], copies[0][1], how)
                        if out is not None:
                            chosen = how
                            break
                        reasons.append(why)
                        if gqa == "native" and not self.enable_gqa_ok:
                            break
                    if chosen:
                        break
                    if gqa != gqa_modes[-1]:
                        copies = []
                if chosen is None:
                    if reasons and all(r.startswith("skipped") for r in reasons):
                        raise Skipped(reasons[-1])
                    reasons = [r for r in reasons if not r.startswith("skipped")]
                    if copies and forms[0][0] == "bool":
                        # A backend checks the mask before the shape, so "no attn_mask" can hide
                        # the real limit: ask once without any mask, to name it first.
                        probe, why = self.try_call(q, copies[0][0], copies[0][1],
                                                   (gqa_modes[-1], "none", None))
                        if probe is None:
                            reasons.insert(0, why)
                        else:
                            reasons.insert(0, "no bottom-right causal form is accepted")
                        del probe
                    raise Unsupported(join_reasons(reasons))
                gqa, kind, _ = chosen
                row["gqa"], row["mask"] = gqa, kind

                if not args.no_check:
                    try:
                        err = self.reference_error(q, copies[0][0], copies[0][1], out, n, depth,
                                                   hq, hkv)
                        row["max_err"] = f"{err:.3g}"
                    except self.oom:  # the float32 reference is larger than the call itself
                        row["max_err"] = "no memory"
                        t.cuda.empty_cache()
                del out

                # Rotation: at least 2 copies, together at least self.rotate bytes.
                per_copy = kv_bytes * (g if gqa == "expanded" else 1)
                want = max(2, math.ceil(self.rotate / per_copy))
                free, _ = t.cuda.mem_get_info()
                budget = min(args.max_bytes, int(0.8 * (free + per_copy)))
                if 2 * per_copy > budget:
                    raise Skipped(f"skipped: 2 copies of the {gqa} K/V take "
                                  f"{fmt_bytes(2 * per_copy)}, over the {fmt_bytes(budget)} "
                                  f"allowed (--max-bytes / free GPU memory)")
                n_copies = min(want, budget // per_copy)
                while len(copies) < n_copies:
                    copies.append(self.make_kv(hkv, depth, dk, dv, dtype,
                                               g if gqa == "expanded" else 1))
                row["copies"] = n_copies

                us = self.time_calls(
                    lambda i: self.call(q, copies[i][0], copies[i][1], chosen), n_copies)
        finally:
            copies = None
        med = statistics.median(us)
        row.update(us_median=f"{med:.3f}", us_min=f"{us[0]:.3f}", us_max=f"{us[-1]:.3f}",
                   gbps=f"{kv_bytes / (med * 1e-6) / 1e9:.2f}",
                   tflops=f"{row['flops'] / (med * 1e-6) / 1e12:.3f}", status="ok")
        if row["max_err"] and float(row["max_err"]) > TOLERANCE[dtype_name]:
            row["status"] = (f"wrong: max|out-ref|/max|ref| = {row['max_err']} > "
                             f"{TOLERANCE[dtype_name]:g}")
        return row

    def time_calls(self, call, n_copies):
        """Sorted µs of -r timed calls call(copy index), after --warmup untimed ones; each timed
        call between two events, after a GPU spin longer than its launch (see the docstring)."""
        t, args = self.torch, self.args
        launch = []  # CPU seconds per call: how long the GPU spin must be
        for i in range(args.warmup):
            c0 = time.perf_counter()
            call(i % n_copies)
            launch.append(time.perf_counter() - c0)
        t.cuda.synchronize()
        launch_us = statistics.median(launch) * 1e6 if launch else 50.0
        spin_cycles = int(2000 * max(100.0, 3.0 * launch_us))  # ~2 cycles per ns
        starts = [t.cuda.Event(enable_timing=True) for _ in range(args.repetitions)]
        ends = [t.cuda.Event(enable_timing=True) for _ in range(args.repetitions)]
        for i in range(args.repetitions):
            if self.sleep is not None:
                self.sleep(spin_cycles)  # the stream is still busy at start
            starts[i].record()
            call(i % n_copies)
            ends[i].record()
        t.cuda.synchronize()
        return sorted(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))

    def kvflash_point(self, kv_type, hq, hkv, dk, dv, depth, n):
        """kvflash through its Python package on one point (--kvflash): the row as point()'s."""
        t, args, kvf = self.torch, self.args, self.kvflash
        row = self.empty_row("kvflash", kv_type, hq, hkv, dk, dv, depth, n)
        row.update(gqa="native" if hq > hkv else "mha", mask="none" if n == 1 else "bottom_right")
        kv_bytes = row["kv_bytes"]
        if n > depth:
            row["status"] = f"skipped: {n} query tokens need a depth of at least {n}"
            return row
        float_types = {"f16": t.float16, "bf16": t.bfloat16, "f32": t.float32}

        def cache(x):  # (1, hkv, depth, d) f16 -> kvflash's (1, depth, hkv, row) cache
            rows = x.transpose(1, 2)
            if kv_type == "f16":
                return rows  # a view: only the row must be contiguous
            if kv_type in float_types:
                return rows.to(float_types[kv_type])
            return kvf.quantize(rows.float().contiguous(), kv_type)

        free, _ = t.cuda.mem_get_info()
        budget = min(args.max_bytes, int(0.8 * free))
        if 2 * kv_bytes > budget:
            raise Skipped(f"skipped: 2 copies of the caches take {fmt_bytes(2 * kv_bytes)}, over "
                          f"the {fmt_bytes(budget)} allowed (--max-bytes / free GPU memory)")
        n_copies = min(max(2, math.ceil(self.rotate / kv_bytes)), budget // kv_bytes)
        q = self.randn((1, hq, n, dk), t.float16)
        qk = q.transpose(1, 2).float().contiguous()  # (1, n, hq, dk)
        typed = {} if kv_type in float_types else {"k_type": kv_type, "v_type": kv_type}
        copies = []
        try:
            k, v = self.make_kv(hkv, depth, dk, dv, t.float16, 1)
            copies.append((cache(k), cache(v)))
            lens = t.tensor([depth], dtype=t.int64, device="cuda")
            out = t.empty((1, n, hq, dv), dtype=t.float32, device="cuda")
            plan = kvf.Plan.for_tensors(qk, copies[0][0], copies[0][1], **typed)
            plan.run(qk, copies[0][0], copies[0][1], lens, out=out)
            if not args.no_check:
                err = self.reference_error(q, k, v, out.transpose(1, 2), n, depth, hq, hkv)
                row["max_err"] = f"{err:.3g}"
            del k, v
            while len(copies) < n_copies:
                k, v = self.make_kv(hkv, depth, dk, dv, t.float16, 1)
                copies.append((cache(k), cache(v)))
                del k, v
            row["copies"] = n_copies
            us = self.time_calls(
                lambda i: plan.run(qk, copies[i][0], copies[i][1], lens, out=out), n_copies)
        finally:
            copies = None
        med = statistics.median(us)
        row.update(us_median=f"{med:.3f}", us_min=f"{us[0]:.3f}", us_max=f"{us[-1]:.3f}",
                   gbps=f"{kv_bytes / (med * 1e-6) / 1e9:.2f}",
                   tflops=f"{row['flops'] / (med * 1e-6) / 1e12:.3f}", status="ok",
                   kernel=plan.kernel)
        if (kv_type in TOLERANCE and row["max_err"]
                and float(row["max_err"]) > TOLERANCE[kv_type]):
            row["status"] = (f"wrong: max|out-ref|/max|ref| = {row['max_err']} > "
                             f"{TOLERANCE[kv_type]:g}")
        return row

    def run_point(self, *key):
        backend, dtype_name, hq, hkv, dk, dv, depth, n = key
        t = self.torch
        try:
            if backend == "kvflash":
                return self.kvflash_point(dtype_name, hq, hkv, dk, dv, depth, n)
            return self.point(*key)
        except (Unsupported, Skipped) as e:
            status = str(e) if isinstance(e, Skipped) else f"unsupported: {e}"
        except self.oom as e:
            status = "error: out of memory: " + short_reason(e).split(": ", 1)[-1][:200]
        except Exception as e:  # noqa: BLE001 - one point never ends the sweep
            status = "error: " + short_reason(e)
        finally:
            t.cuda.empty_cache()
        return self.empty_row(backend, dtype_name, hq, hkv, dk, dv, depth, n, status)


def human_line(r):
    d = f"{r['head_dim_k']}" if r["head_dim_k"] == r["head_dim_v"] else \
        f"{r['head_dim_k']}/{r['head_dim_v']}"
    us = "-" if not r["us_median"] else \
        f"{fmt_us(float(r['us_median']))} ({fmt_us(float(r['us_min']))}-" \
        f"{fmt_us(float(r['us_max']))})"
    gbps = f"{float(r['gbps']):.0f}" if r["gbps"] else "-"
    tflops = f"{float(r['tflops']):.1f}" if r["tflops"] else "-"
    return (f"| {r['backend']:<9} | {r['dtype']:<4} | {r['q_heads']}/{r['kv_heads']:<3} | "
            f"{d:>7} | {r['depth']:>8} | {r['q_tokens']:>5} | {r['gqa'] or '-':<8} | "
            f"{r['mask'] or '-':<11} | {us:>22} | {gbps:>6} | {tflops:>7} | "
            f"{r['max_err'] or '-':>8} | {r['status']} |")


HUMAN_HEADER = ("| backend   | type | heads  |       D |    depth |     n | gqa      | mask        |"
                "       µs/call (min-max) |  GB/s | TFLOP/s |  max_err | status |\n"
                "|---|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---|")


def self_test():
    """What runs without torch: argument parsing and the flop count (a CTest test)."""
    fails = []

    def expect(what, cond):
        if not cond:
            fails.append(what)

    def usage_error(argv):
        stderr, sys.stderr = sys.stderr, open(os.devnull, "w")
        try:
            parse_args(argv)
            return False
        except SystemExit as e:
            return e.code == 2
        finally:
            sys.stderr.close()
            sys.stderr = stderr

    a = parse_args([])
    expect("decode defaults", a.points == [(1, 4096), (1, 32768)] and a.head_dim == [(128, 128)]
           and a.backends == ["cudnn", "flash"])
    a = parse_args(["-n", "1,8", "-d", "4K"])
    expect("-n x -d", a.points == [(1, 4096), (8, 4096)])
    a = parse_args(["--prefill"])
    expect("--prefill points", a.points == [(8192, 8192), (32768, 32768), (2048, 8192),
                                            (2048, 32768), (2048, 131072)])
    expect("--prefill head dims", a.head_dim == [(64, 64), (128, 128), (256, 256)])
    expect("--prefill backends", a.backends == ["cudnn", "flash", "efficient"])
    a = parse_args(["--prefill", "--points", "2048:128K", "--head-dim", "128",
                    "--backends", "flash"])
    expect("--prefill with explicit flags", a.points == [(2048, 131072)]
           and a.head_dim == [(128, 128)] and a.backends == ["flash"])
    for bad in (["--points", "4096:2048"], ["--points", "2048"], ["--points", "0:8"],
                ["--prefill", "-d", "8192"], ["--points", "9:9", "-n", "9"]):
        expect(f"usage error for {' '.join(bad)}", usage_error(bad))
    a = parse_args(["--kvflash", "f16,q8_0", "--kvflash", "turbo3"])
    expect("--kvflash types", a.kvflash == ["f16", "q8_0", "turbo3"])
    expect("no --kvflash", parse_args([]).kvflash == [])
    expect("usage error for --kvflash q5_1", usage_error(["--kvflash", "q5_1"]))
    # Against the hand-computed counts of kvflash-bench's BenchMetrics.VisiblePairs.
    expect("decode sees the whole cache", visible_pairs(1, 100) == 100)
    expect("fresh prompt: a triangle", visible_pairs(4, 4) == 1 + 2 + 3 + 4)
    expect("chunk: queries at 3 and 4", visible_pairs(2, 5) == 4 + 5)
    expect("no mask", visible_pairs(3, 5, causal=False) == 15)
    expect("window 2", visible_pairs(4, 4, window=2) == 1 + 2 + 2 + 2)
    expect("non-causal window", visible_pairs(2, 5, causal=False, window=2) == 3 + 2)
    expect("queries before position 0", visible_pairs(3, 2) == 0 + 1 + 2)
    expect("2048 onto 8192", visible_pairs(2048, 8192) == 2048 * 6144 + 2048 * 2049 // 2)
    expect("flops of a chunk", attention_flops(32, 128, 128, 2048, 8192)
           == 2 * 256 * 32 * (2048 * 6144 + 2048 * 2049 // 2))
    expect("flops of decode", attention_flops(32, 128, 128, 1, 1024) == 2 * 256 * 32 * 1024)
    for f in fails:
        print(f"self-test FAILED: {f}")
    print("self-test:", "failed" if fails else "passed")
    return 1 if fails else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--self-test"]:
        return self_test()
    args = parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(f"bench_sdpa: cannot import torch ({e}); nothing measured", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print(f"bench_sdpa: torch {torch.__version__} sees no CUDA device; nothing measured",
              file=sys.stderr)
        return 3
    bench = Bench(torch, args)
    bench.kvflash = None
    if args.kvflash:
        try:
            import kvflash
        except ImportError as e:
            print(f"bench_sdpa: --kvflash: cannot import kvflash ({e}; PYTHONPATH=BUILD/python)",
                  file=sys.stderr)
            return 3
        bench.kvflash = kvflash
    print(bench.header(), file=sys.stderr)
    print(HUMAN_HEADER, file=sys.stderr, flush=True)
    bench.warm_up_gpu()

    out = sys.stdout if args.output == "-" else open(args.output, "w", newline="")
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    wrong = 0
    started = time.perf_counter()
    try:
        # Depth innermost, as kvflash-bench; backends and dtypes outermost so that one backend's
        # points run together.
        runs = [(b, d) for b in args.backends for d in args.dtypes]
        runs += [("kvflash", kv) for kv in args.kvflash]
        for backend, dtype_name in runs:
            for hq, hkv in args.heads:
                for dk, dv in args.head_dim:
                    for n, depth in args.points:
                        r = bench.run_point(backend, dtype_name, hq, hkv, dk, dv, depth, n)
                        wrong += r["status"].startswith("wrong")
                        writer.writerow(r)
                        out.flush()
                        print(human_line(r), file=sys.stderr, flush=True)
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"bench_sdpa: done in {time.perf_counter() - started:.1f} s"
          f"{f'; {wrong} wrong results' if wrong else ''}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
