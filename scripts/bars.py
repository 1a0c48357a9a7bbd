#!/usr/bin/env python3
"""bars.py: issue 43's decode speed bars, each point with its measured value and PASS or FAIL.

    python3 scripts/bars.py OUTDIR > OUTDIR/bars.md     (a scripts/gpu_run.sh output folder)
    python3 scripts/bars.py --self-test                  (fake CSVs with known verdicts; CTest)

Reads, where present, the files scripts/gpu_run.sh writes into OUTDIR:
  bench_cuda.csv     kvflash-bench decode rows (-o csv): the single-sequence matrix
  bench_paged.csv    the same shapes with paged caches ("paged N" in the test column) and without
  bench_serving.csv  serving batches (--ragged serving64 / serving256: ", N lens" in the test)
  bench_sdpa.csv     scripts/bench_sdpa.py: PyTorch SDPA on the same GPU in the same run
  loop_bars.csv      kvflash-loop -o csv per KV type, with the columns type and layers in front
A bar whose file or rows are missing is listed as not measured (never as a pass).

The bars (issue 43, "what must be true"; % is of the read bandwidth kvflash-bench measured in
the same run, its mem_bw_gbps column; one query token, 32/8 heads, head dim 128 unless named):
  fp8 share     fp8_e4m3 and fp8_e5m2 read at f16's share of the bandwidth or more, each depth
  serving       every serving-batch row at >= 80%
  paged         a paged cache (page size 16 or more) within 1.1x of the contiguous time
  vs SDPA       f16 and bf16 at least as fast as SDPA's fastest backend of that dtype, 4K-1M
  quantized     q8_0, q4_0, fp8 >= 85% at 256K and 1M; turbo2/3/4 and mixed pairs >= 70%; the
                same at GQA 8 (32/4) and head dim 256
  8 tokens      8 query tokens <= 1.25x the time of one at 32K and above
  loop          a 32-layer step in one graph: the floor (every layer's KV bytes at the read
                bandwidth) >= 75% of the time per token at 32K and above; <= 6 us per layer at 4K

Standard library only. Exit codes: 0 the table was printed (whatever the verdicts), 2 usage.
"""

import csv
import os
import re
import statistics
import sys
import tempfile

QUANT_85 = ("q8_0", "q4_0", "fp8_e4m3", "fp8_e5m2")
TURBO_70 = ("turbo2", "turbo3", "turbo4")
SHAPES = (("32/8", "128"), ("32/4", "128"), ("32/8", "256"))


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def read_csv(path):
    """Rows as dicts from the first line holding a header with a column named like one of ours;
    [] when the file is missing or has no rows."""
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("backend,", "type,")):
            return [r for r in csv.DictReader(lines[i:]) if r.get("us_median") or r.get("depth")]
    return []


def page_of(row):
    m = re.search(r"paged (\d+)", row.get("test", ""))
    return int(m.group(1)) if m else 0


def is_serving(row):
    return " lens" in row.get("test", "")


def shape(row):
    heads = f"{row['n_q_heads']}/{row['n_kv_heads']}"
    dims = row["head_dim_k"] if row["head_dim_k"] == row["head_dim_v"] else \
        f"{row['head_dim_k']}/{row['head_dim_v']}"
    return heads, dims


def pair(row):
    return row["k_type"] if row["k_type"] == row["v_type"] else f"{row['k_type']}/{row['v_type']}"


def decode_rows(rows):
    """Single-sequence CUDA decode rows with a time: (pair, heads, dims, n_q, depth, page) -> row
    (the first of duplicates)."""
    out = {}
    for r in rows:
        if not r.get("backend", "").startswith("cuda") or is_serving(r) or num(r.get("us_median")) is None:
            continue
        if r.get("batch", "1") != "1":
            continue
        heads, dims = shape(r)
        key = (pair(r), heads, dims, int(r["n_q"]), int(r["depth"]), page_of(r))
        out.setdefault(key, r)
    return out


def pct(row):
    return num(row.get("pct_mem_bw"))


def depth_name(d):
    return f"{d // 1048576}M" if d % 1048576 == 0 else f"{d // 1024}K" if d % 1024 == 0 else str(d)


class Bars:
    def __init__(self):
        self.rows = []  # (bar, point, measured, target, verdict)

    def add(self, bar, point, measured, target, ok):
        self.rows.append((bar, point, measured, target, "PASS" if ok else "FAIL"))

    def missing(self, bar, what):
        self.rows.append((bar, what, "-", "-", "not measured"))

    def markdown(self):
        lines = ["| bar | point | measured | target | verdict |", "|---|---|---:|---:|---|"]
        lines += [f"| {b} | {p} | {m} | {t} | {v} |" for b, p, m, t, v in self.rows]
        counts = {v: sum(1 for r in self.rows if r[4] == v) for v in ("PASS", "FAIL", "not measured")}
        lines.append("")
        lines.append(f"{len(self.rows)} points: {counts['PASS']} PASS, {counts['FAIL']} FAIL, "
                     f"{counts['not measured']} not measured")
        return "\n".join(lines)


def fp8_share(bars, dec):
    base = {k[4]: v for k, v in dec.items() if k[:4] == ("f16", "32/8", "128", 1) and k[5] == 0}
    if not base:
        return bars.missing("fp8 share", "f16 and fp8 rows (bench_cuda.csv)")
    for t in ("fp8_e4m3", "fp8_e5m2"):
        for d in sorted(base):
            r = dec.get((t, "32/8", "128", 1, d, 0))
            if r is None or pct(r) is None or pct(base[d]) is None:
                bars.missing("fp8 share", f"{t} {depth_name(d)}")
                continue
            bars.add("fp8 share", f"{t} {depth_name(d)}", f"{pct(r):.1f}% (f16 {pct(base[d]):.1f}%)",
                     ">= f16", pct(r) >= pct(base[d]))


def serving(bars, rows):
    sel = [r for r in rows if is_serving(r) and r.get("backend", "").startswith("cuda")]
    if not sel:
        return bars.missing("serving", "bench_serving.csv")
    for r in sel:
        p = pct(r)
        point = f"{pair(r)} {r['batch']} seqs, {'paged ' + str(page_of(r)) if page_of(r) else 'contiguous'}"
        if p is None:
            bars.missing("serving", point)
        else:
            bars.add("serving", point, f"{p:.1f}%", ">= 80%", p >= 80.0)


def paged(bars, dec):
    pts = [(k, r) for k, r in dec.items() if k[5] >= 16]
    if not pts:
        return bars.missing("paged", "bench_paged.csv")
    for k, r in sorted(pts, key=lambda kr: (kr[0][0], kr[0][5], kr[0][4])):
        base = dec.get(k[:5] + (0,))
        point = f"{k[0]} {k[1]} D{k[2]} n{k[3]} {depth_name(k[4])} page {k[5]}"
        if base is None:
            bars.missing("paged", point + " (no contiguous row)")
            continue
        ratio = num(r["us_median"]) / num(base["us_median"])
        bars.add("paged", point, f"{ratio:.3f}x", "<= 1.1x", ratio <= 1.1)


def vs_sdpa(bars, dec, sdpa_rows):
    best = {}
    for r in sdpa_rows:
        if r.get("status") != "ok" or num(r.get("us_median")) is None:
            continue
        if (r["q_heads"], r["kv_heads"], r["head_dim_k"], r["q_tokens"]) != ("32", "8", "128", "1"):
            continue
        key = (r["dtype"], int(r["depth"]))
        if key not in best or num(r["us_median"]) < best[key][0]:
            best[key] = (num(r["us_median"]), r["backend"])
    if not best:
        return bars.missing("vs SDPA", "bench_sdpa.csv")
    for (dtype, d), (us, backend) in sorted(best.items()):
        if d < 4096:
            continue
        r = dec.get((dtype, "32/8", "128", 1, d, 0))
        point = f"{dtype} {depth_name(d)}"
        if r is None:
            bars.missing("vs SDPA", point)
            continue
        ratio = us / num(r["us_median"])
        bars.add("vs SDPA", point, f"{ratio:.3f}x ({backend} {us:.1f} us)", ">= 1.0x", ratio >= 1.0)


def quantized(bars, dec):
    seen = False
    for heads, dims in SHAPES:
        for (p, h, dm, n, d, page), r in sorted(dec.items()):
            if (h, dm, n, page) != (heads, dims, 1, 0) or d not in (262144, 1048576):
                continue
            ktype, _, vtype = p.partition("/")
            if vtype and vtype != ktype:
                target = 70.0
            elif ktype in QUANT_85:
                target = 85.0
            elif ktype in TURBO_70:
                target = 70.0
            else:
                continue
            seen = True
            v = pct(r)
            point = f"{p} {h} D{dm} {depth_name(d)}"
            if v is None:
                bars.missing("quantized", point)
            else:
                bars.add("quantized", point, f"{v:.1f}%", f">= {target:.0f}%", v >= target)
    if not seen:
        bars.missing("quantized", "256K / 1M rows (bench_cuda.csv)")


def eight_tokens(bars, dec):
    seen = False
    for (p, h, dm, n, d, page), r in sorted(dec.items()):
        if n != 8 or d < 32768:
            continue
        one = dec.get((p, h, dm, 1, d, page))
        point = f"{p} {h} D{dm} {depth_name(d)}" + (f" page {page}" if page else "")
        seen = True
        if one is None:
            bars.missing("8 tokens", point + " (no 1-token row)")
            continue
        ratio = num(r["us_median"]) / num(one["us_median"])
        bars.add("8 tokens", point, f"{ratio:.3f}x", "<= 1.25x", ratio <= 1.25)
    if not seen:
        bars.missing("8 tokens", "8-token rows at >= 32K (bench_cuda.csv)")


def loop(bars, loop_rows, mem_bw):
    sel = [r for r in loop_rows if r.get("graphs") == "on"]
    if not sel:
        return bars.missing("loop", "loop_bars.csv")
    for r in sel:
        d, layers, us = int(r["depth"]), int(r["layers"]), num(r["us/token"])
        point = f"{r['type']} {depth_name(d)}, {layers} layers"
        if d == 4096:
            per_layer = us / layers
            bars.add("loop", point, f"{per_layer:.2f} us/layer", "<= 6 us", per_layer <= 6.0)
        elif d >= 32768:
            if not mem_bw:
                bars.missing("loop", point + " (no read bandwidth)")
                continue
            share = 100.0 * num(r["KV GB/s"]) / mem_bw
            bars.add("loop", point, f"{share:.1f}% of the floor", ">= 75%", share >= 75.0)


def report(outdir):
    cuda = read_csv(os.path.join(outdir, "bench_cuda.csv"))
    paged_rows = read_csv(os.path.join(outdir, "bench_paged.csv"))
    serving_rows = read_csv(os.path.join(outdir, "bench_serving.csv"))
    dec = decode_rows(cuda + paged_rows)
    bws = [num(r.get("mem_bw_gbps")) for r in cuda + paged_rows + serving_rows]
    bws = [b for b in bws if b]
    mem_bw = statistics.median(bws) if bws else None
    bars = Bars()
    fp8_share(bars, dec)
    serving(bars, serving_rows)
    paged(bars, dec)
    vs_sdpa(bars, dec, read_csv(os.path.join(outdir, "bench_sdpa.csv")))
    quantized(bars, dec)
    eight_tokens(bars, dec)
    loop(bars, read_csv(os.path.join(outdir, "loop_bars.csv")), mem_bw)
    head = "Issue 43's bars (scripts/bars.py); read bandwidth " + \
        (f"{mem_bw:.0f} GB/s" if mem_bw else "unknown") + "\n\n"
    return head + bars.markdown() + "\n"


BENCH_HEADER = ("backend,kernel,cpu_info,k_type,v_type,n_q_heads,n_kv_heads,head_dim_k,head_dim_v,"
                "batch,depth,n_q,test,threads,splits,reps,copies,us_median,us_min,us_max,kv_bytes,"
                "gbps,flops,tflops,mem_bw_gbps,pct_mem_bw,seed,host_us")


def bench_line(k, v, depth, us, pct_bw, n_q=1, test="decode", heads=(32, 8), dim=128, batch=1):
    return (f"cuda.decode,x,,{k},{v},{heads[0]},{heads[1]},{dim},{dim},{batch},{depth},{n_q},\"{test}\","
            f"1,1,20,2,{us},{us},{us},0,0,0,0,4000,{pct_bw},1,1")


def self_test():
    fails = []

    def expect(what, cond):
        if not cond:
            fails.append(what)

    with tempfile.TemporaryDirectory() as d:
        def write(name, lines):
            with open(os.path.join(d, name), "w") as f:
                f.write("\n".join(lines) + "\n")

        write("bench_cuda.csv", [
            "kvflash-bench: a log line before the header", BENCH_HEADER,
            bench_line("f16", "f16", 1048576, 1000, 95.0),
            bench_line("fp8_e4m3", "fp8_e4m3", 1048576, 520, 96.0),    # fp8 share PASS
            bench_line("fp8_e5m2", "fp8_e5m2", 1048576, 560, 90.0),    # FAIL
            bench_line("q8_0", "q8_0", 262144, 200, 84.9),             # 85% FAIL
            bench_line("q8_0", "q8_0", 262144, 250, 80.0, n_q=8),      # 1.25x PASS (= bar)
            bench_line("turbo3", "turbo3", 1048576, 900, 71.0),        # 70% PASS
            bench_line("q8_0", "turbo4", 1048576, 800, 69.0),          # mixed 70% FAIL
            bench_line("q4_0", "q4_0", 1048576, 300, 86.0, heads=(32, 4)),  # GQA 8 PASS
            bench_line("f16", "f16", 4096, 18.0, 30.0),
        ])
        write("bench_paged.csv", [
            BENCH_HEADER,
            bench_line("q4_0", "q4_0", 32768, 30.0, 70.0),
            bench_line("q4_0", "q4_0", 32768, 33.5, 63.0, test="decode paged 16"),  # 1.117x FAIL
            bench_line("q4_0", "q4_0", 32768, 31.0, 68.0, test="decode paged 64"),  # PASS
            bench_line("q4_0", "q4_0", 32768, 90.0, 20.0, test="decode paged 1"),   # not a bar
        ])
        write("bench_serving.csv", [
            BENCH_HEADER,
            bench_line("f16", "f16", 32700, 1500, 81.0, test="decode paged 16, 64 lens", batch=64),
            bench_line("q4_0", "q4_0", 4090, 300, 79.0, test="decode, 256 lens", batch=256),
        ])
        write("bench_sdpa.csv", [
            "backend,dtype,q_heads,kv_heads,head_dim_k,head_dim_v,depth,q_tokens,gqa,us_median,"
            "us_min,us_max,kv_bytes,gbps,status,mask,copies,max_err",
            "cudnn,f16,32,8,128,128,1048576,1,native,1010,1,1,1,1,ok,none,2,0",
            "flash,f16,32,8,128,128,1048576,1,native,1200,1,1,1,1,ok,none,2,0",
            "cudnn,f16,32,8,128,128,4096,1,native,15.5,1,1,1,1,ok,none,2,0",
            "cudnn,bf16,32,8,128,128,4096,1,native,15.5,1,1,1,1,failed,none,2,0",
        ])
        write("loop_bars.csv", [
            "type,layers,depth,graphs,us/token,kernels us,overhead %,KV GB/s,graph kernels",
            "q8_0,32,4096,on,180,190,-5,500,64",       # 5.6 us per layer PASS
            "q8_0,32,4096,off,400,190,-5,500,",        # eager: not a bar
            "f16,32,32768,on,1200,1190,1,2900,64",     # 2900 / 4000 = 72.5% FAIL
            "f16,32,262144,on,9000,8990,1,3100,64",    # 77.5% PASS
        ])
        text = report(d)

    def verdict(bar, point):
        for line in text.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == 5 and cells[0] == bar and cells[1].startswith(point):
                return cells[4]
        return None

    cases = [("fp8 share", "fp8_e4m3 1M", "PASS"), ("fp8 share", "fp8_e5m2 1M", "FAIL"),
             ("fp8 share", "fp8_e4m3 4K", "not measured"),
             ("quantized", "q8_0 32/8 D128 256K", "FAIL"),
             ("quantized", "turbo3 32/8 D128 1M", "PASS"),
             ("quantized", "q8_0/turbo4 32/8 D128 1M", "FAIL"),
             ("quantized", "q4_0 32/4 D128 1M", "PASS"),
             ("8 tokens", "q8_0 32/8 D128 256K", "PASS"),
             ("paged", "q4_0 32/8 D128 n1 32K page 16", "FAIL"),
             ("paged", "q4_0 32/8 D128 n1 32K page 64", "PASS"),
             ("serving", "f16 64 seqs, paged 16", "PASS"),
             ("serving", "q4_0 256 seqs, contiguous", "FAIL"),
             ("vs SDPA", "f16 1M", "PASS"),       # cuDNN 1010 us over kvflash's 1000
             ("vs SDPA", "f16 4K", "FAIL"),       # 15.5 / 18
             ("loop", "q8_0 4K", "PASS"), ("loop", "f16 32K", "FAIL"), ("loop", "f16 256K", "PASS")]
    for bar, point, want in cases:
        got = verdict(bar, point)
        expect(f"{bar} / {point}: {got}, expected {want}", got == want)
    expect("page 1 is no bar", "page 1 " not in text)
    expect("the failed bf16 SDPA row is no reference", verdict("vs SDPA", "bf16 4K") is None)
    expect("read bandwidth from the CSV", "read bandwidth 4000 GB/s" in text)
    vs_sdpa_1m = [ln for ln in text.splitlines() if "| f16 1M |" in ln]
    expect("SDPA's fastest backend is named", vs_sdpa_1m and "cudnn 1010.0 us" in vs_sdpa_1m[0])
    with tempfile.TemporaryDirectory() as empty:
        t = report(empty)
        expect("an empty folder gives only not-measured bars",
               "0 PASS, 0 FAIL" in t and "not measured" in t)
    for f in fails:
        print(f"self-test FAILED: {f}")
    if fails:
        print(text)
    print("self-test:", "failed" if fails else "passed")
    return 1 if fails else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    sys.stdout.write(report(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
