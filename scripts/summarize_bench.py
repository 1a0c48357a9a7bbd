#!/usr/bin/env python3
"""Summarizes kvflash-bench CSV files (CUDA runs) as markdown for issue 4's questions.

usage: summarize_bench.py MAIN.csv [SWEEP.csv]
  MAIN.csv   rows to tabulate: speed and % of the measured streaming-read bandwidth per point
  SWEEP.csv  a depth sweep per K/V pair: straight-line fit of time against depth, the largest
             deviation from it, and the step between close depths (2047/2049, ...)
Standard library only."""
import csv
import sys


def rows(path):
    try:
        with open(path, newline="") as f:
            return [r for r in csv.DictReader(f) if r.get("backend") and r.get("us_median")]
    except OSError as e:
        print(f"(cannot read {path}: {e})")
        return []


def main_table(rs):
    print("| K/V | heads | D | q | depth | µs median | GB/s | % of read bw |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for r in rs:
        print(f"| {r['k_type']}/{r['v_type']} | {r['n_q_heads']}/{r['n_kv_heads']} | "
              f"{r['head_dim_k']}/{r['head_dim_v']} | {r['n_q']} | {r['depth']} | "
              f"{float(r['us_median']):.1f} | {float(r['gbps']):.0f} | "
              f"{float(r['pct_mem_bw']):.1f} |")


def sweep(rs):
    by = {}
    for r in rs:
        by.setdefault((r["k_type"], r["v_type"], r["n_q"]), []).append(
            (int(r["depth"]), float(r["us_median"])))
    for (k, v, q), pts in by.items():
        pts.sort()
        n = len(pts)
        if n < 3:
            continue
        mx = sum(d for d, _ in pts) / n
        my = sum(t for _, t in pts) / n
        sxx = sum((d - mx) ** 2 for d, _ in pts)
        b = sum((d - mx) * (t - my) for d, t in pts) / sxx
        a = my - b * mx
        dev = max(abs(t - (a + b * d)) / (a + b * d) for d, t in pts)
        worst = max(pts, key=lambda p: abs(p[1] - (a + b * p[0])) / (a + b * p[0]))
        print(f"\n{k}/{v}, {q} query token(s): t = {a:.2f} µs + {b * 1e6:.3f} µs per 1M tokens; "
              f"largest deviation from the fit {100 * dev:.1f}% (at depth {worst[0]})")
        close = [(pts[i], pts[i + 1]) for i in range(n - 1)
                 if pts[i + 1][0] - pts[i][0] <= 2]
        for (d0, t0), (d1, t1) in close:
            print(f"  step {d0} -> {d1}: {t0:.2f} -> {t1:.2f} µs ({100 * (t1 / t0 - 1):+.1f}%)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main_table(rows(sys.argv[1]))
    if len(sys.argv) > 2:
        sweep(rows(sys.argv[2]))
