#!/usr/bin/env python3
"""compare_prefill.py: prefill TFLOP/s of kvflash per KV type, and against PyTorch SDPA.

    python3 scripts/compare_prefill.py bench_prefill.csv bench_sdpa_prefill.csv > prefill.md
    python3 scripts/compare_prefill.py --self-test     (fake CSVs with known ratios; a CTest test)

Inputs: the CSV of `kvflash-bench -o csv` (rows with n_q > 8 are prefill; columns k_type,
v_type, n_q_heads, n_kv_heads, head_dim_k, head_dim_v, depth, n_q, tflops, ...) and the CSV of
`scripts/bench_sdpa.py --prefill` (backend, dtype, q_heads, kv_heads, head_dim_k, head_dim_v,
depth, q_tokens, status, tflops, ...). Both count 2 * (Dk + Dv) flops per visible (query, key)
pair under the bottom-right causal mask, so TFLOP/s compare directly, and a ratio of TFLOP/s is
a ratio of times. Either file may be missing or empty: the tables then show what the other has.

A shape is (query heads / KV heads, head dims, query tokens, depth). Two tables:
  1. kvflash, one row per shape, one column per K/V type pair: TFLOP/s and, in parentheses, that
     over the f16/f16 TFLOP/s of the same shape (< 1: slower than f16).
  2. kvflash f16/f16 against the fastest SDPA configuration (backend and dtype) that ran the
     shape: both TFLOP/s and their ratio (> 1: kvflash is faster).

Standard library only. Exit codes: 0 a table was printed, 1 neither file had a prefill row,
2 usage.
"""

import csv
import os
import sys
import tempfile

MAX_DECODE_QUERIES = 8  # kvflash-bench: n_q above this is prefill (TFLOP/s)
BASE_PAIR = ("f16", "f16")


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def read_rows(path):
    """Rows as dicts from the first line holding a header with a tflops column (log lines before
    it are skipped); [] for a missing or empty file."""
    if not path or not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if "tflops" in next(csv.reader([line]), []):
            return list(csv.DictReader(lines[i:]))
    return []


def kvflash_prefill(rows):
    """{shape: {(k, v): tflops}} of the prefill rows."""
    out = {}
    for r in rows:
        n, t = num(r.get("n_q")), num(r.get("tflops"))
        if n is None or n <= MAX_DECODE_QUERIES or t is None:
            continue
        shape = tuple(int(num(r[c])) for c in ("n_q_heads", "n_kv_heads", "head_dim_k",
                                               "head_dim_v", "n_q", "depth"))
        out.setdefault(shape, {})[(r["k_type"], r["v_type"])] = t
    return out


def sdpa_prefill(rows):
    """{shape: (label, tflops)}: the fastest configuration that ran each prefill shape."""
    out = {}
    for r in rows:
        n, t = num(r.get("q_tokens")), num(r.get("tflops"))
        if n is None or n <= MAX_DECODE_QUERIES or t is None or r.get("status") != "ok":
            continue
        shape = tuple(int(num(r[c])) for c in ("q_heads", "kv_heads", "head_dim_k",
                                               "head_dim_v", "q_tokens", "depth"))
        label = f"{r['backend']} {r['dtype']}"
        if shape not in out or t > out[shape][1]:
            out[shape] = (label, t)
    return out


def shape_name(shape):
    hq, hkv, dk, dv, n, depth = shape
    d = f"{dk}" if dk == dv else f"{dk}/{dv}"
    kind = "fresh prompt" if n == depth else "chunk"
    return f"{hq}/{hkv}", d, f"{n}", f"{depth}", kind


def pair_name(pair):
    return pair[0] if pair[0] == pair[1] else f"{pair[0]}/{pair[1]}"


def md_table(header, rows, text_columns):
    """Numbers right-aligned, the columns named in text_columns left-aligned."""
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" if h in text_columns else "---:" for h in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out)


def type_table(kv):
    pairs = []
    for by_pair in kv.values():
        for pair in by_pair:
            if pair not in pairs:
                pairs.append(pair)
    # f16/f16 first (the base of the ratios), the others in the order the CSV has them.
    pairs = sorted(pairs, key=lambda p: (p != BASE_PAIR, pairs.index(p)))
    rows = []
    for shape in sorted(kv):
        base = kv[shape].get(BASE_PAIR)
        cells = []
        for pair in pairs:
            t = kv[shape].get(pair)
            if t is None:
                cells.append("—")
            elif base and pair != BASE_PAIR:
                cells.append(f"{t:.1f} ({t / base:.2f}x)")
            else:
                cells.append(f"{t:.1f}")
        rows.append(list(shape_name(shape)) + cells)
    header = ["heads", "D", "n", "depth", "kind"] + [pair_name(p) for p in pairs]
    return md_table(header, rows, {"heads", "D", "kind"})


def sdpa_table(kv, sdpa):
    rows = []
    for shape in sorted(set(kv) | set(sdpa)):
        ours = kv.get(shape, {}).get(BASE_PAIR)
        label, theirs = sdpa.get(shape, ("—", None))
        ratio = f"{ours / theirs:.2f}" if ours and theirs else "—"
        rows.append(list(shape_name(shape)) + [
            f"{ours:.1f}" if ours else "—", label, f"{theirs:.1f}" if theirs else "—", ratio])
    header = ["heads", "D", "n", "depth", "kind", "kvflash f16 TFLOP/s", "best SDPA",
              "SDPA TFLOP/s", "kvflash / SDPA"]
    return md_table(header, rows, {"heads", "D", "kind", "best SDPA"})


def report(kv_path, sdpa_path):
    kv = kvflash_prefill(read_rows(kv_path))
    sdpa = sdpa_prefill(read_rows(sdpa_path))
    if not kv and not sdpa:
        return None
    parts = ["## Prefill: kvflash TFLOP/s per KV type (x f16/f16 of the same shape)", "",
             type_table(kv) if kv else "(no kvflash prefill rows)", "",
             "## Prefill: kvflash f16/f16 against the fastest PyTorch SDPA", "",
             sdpa_table(kv, sdpa), "",
             "TFLOP/s count 2 * (Dk + Dv) flops per visible (query, key) pair and query head "
             "(bottom-right causal), in both tools."]
    return "\n".join(parts) + "\n"


KV_HEADER = ("backend,kernel,cpu_info,k_type,v_type,n_q_heads,n_kv_heads,head_dim_k,head_dim_v,"
             "batch,depth,n_q,test,threads,splits,reps,copies,us_median,us_min,us_max,kv_bytes,"
             "gbps,flops,tflops,mem_bw_gbps,pct_mem_bw,seed,host_us")
SDPA_HEADER = ("backend,dtype,q_heads,kv_heads,head_dim_k,head_dim_v,depth,q_tokens,gqa,"
               "us_median,us_min,us_max,kv_bytes,gbps,status,mask,copies,max_err,flops,tflops")


def self_test():
    kv_csv = "\n".join([
        "kvflash-bench: a log line before the header",
        KV_HEADER,
        "cuda,cuda.prefill,x,f16,f16,32,8,128,128,1,8192,2048,prefill 2048,1,1,30,2,1,1,1,0,0,0,"
        "400,,,42,",
        "cuda,cuda.prefill,x,q8_0,turbo4,32,8,128,128,1,8192,2048,prefill 2048,1,1,30,2,1,1,1,0,"
        "0,0,300,,,42,",
        "cuda,cuda.prefill,x,q4_0,q4_0,32,8,128,128,1,8192,8192,prefill 8192,1,1,30,2,1,1,1,0,0,"
        "0,250,,,42,",
        "cuda,cuda.decode,x,f16,f16,32,8,128,128,1,8192,1,decode,1,1,30,2,1,1,1,0,3000,0,0.5,,,"
        "42,",
    ])
    sdpa_csv = "\n".join([
        SDPA_HEADER,
        "cudnn,f16,32,8,128,128,8192,2048,expanded,1,1,1,0,0,ok,bool,2,0.001,0,500",
        "flash,f16,32,8,128,128,8192,2048,native,1,1,1,0,0,ok,lower_right,2,0.001,0,320",
        "efficient,f16,32,8,128,128,8192,2048,,,,,0,,unsupported: no,,,,0,",
        "flash,bf16,32,8,128,128,8192,8192,native,1,1,1,0,0,ok,causal,2,0.001,0,600",
        "cudnn,f16,32,8,128,128,8192,1,native,1,1,1,0,0,ok,none,2,0.001,0,9",
    ])
    fails = []

    def expect(what, cond):
        if not cond:
            fails.append(what)

    with tempfile.TemporaryDirectory() as d:
        kv_path, sdpa_path = os.path.join(d, "kv.csv"), os.path.join(d, "sdpa.csv")
        with open(kv_path, "w") as f:
            f.write(kv_csv + "\n")
        with open(sdpa_path, "w") as f:
            f.write(sdpa_csv + "\n")
        kv = kvflash_prefill(read_rows(kv_path))
        sdpa = sdpa_prefill(read_rows(sdpa_path))
        text = report(kv_path, sdpa_path)
        only_kv = report(kv_path, os.path.join(d, "missing.csv"))
        nothing = report(os.path.join(d, "missing.csv"), "")
    chunk, fresh = (32, 8, 128, 128, 2048, 8192), (32, 8, 128, 128, 8192, 8192)
    expect("decode rows are left out", set(kv) == {chunk, fresh} and set(sdpa) == {chunk, fresh})
    expect("the fastest SDPA that ran", sdpa.get(chunk) == ("cudnn f16", 500.0))
    expect("any dtype competes", sdpa.get(fresh) == ("flash bf16", 600.0))
    expect("a type against f16 of its shape", "300.0 (0.75x)" in text)
    expect("f16 itself without a ratio", "| 400.0 |" in text)
    expect("kvflash f16 against the best SDPA", "| 400.0 | cudnn f16 | 500.0 | 0.80 |" in text)
    expect("a shape without kvflash f16 has no ratio",
           "| 8192 | 8192 | fresh prompt | — | flash bf16 | 600.0 | — |" in text)
    expect("a type missing at a shape", "| — |" in text)
    expect("a missing SDPA file still gives the kvflash table",
           only_kv is not None and "0.75x" in only_kv)
    expect("nothing at all gives None", nothing is None)
    for f in fails:
        print(f"self-test FAILED: {f}")
    print("self-test:", "failed" if fails else "passed")
    return 1 if fails else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    text = report(argv[1], argv[2])
    if text is None:
        print(f"compare_prefill: no prefill rows in {argv[1]} or {argv[2]}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
