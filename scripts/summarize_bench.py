#!/usr/bin/env python3
"""Summarizes kvflash-bench CSV files (CUDA runs) as markdown for issue 4's questions.

usage: summarize_bench.py MAIN.csv [SWEEP.csv]
       summarize_bench.py --self-test   (the fits on data with known answers; a CTest test)
  MAIN.csv   rows to tabulate: speed and % of the measured streaming-read bandwidth per point
  SWEEP.csv  a depth sweep per K/V pair: straight-line fit of time against depth (least squares)
             and the largest deviation from it, the straight line with the least largest
             relative deviation (whether any line keeps every depth within 10%), and the step
             between close depths (2047/2049, ...)
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


def best_line(pts):
    """The line a + b * depth with the least largest relative deviation |t - line| / t over the
    points (a Chebyshev fit in the relative error): for a fixed slope b the best a makes the
    deviation max over pairs of (c_i - c_j) / (t_i + t_j), c = t - b * depth, which is convex in b;
    a ternary search finds b. Returns (a, b, deviation)."""
    def dev_at(b):
        c = [(t - b * d, t) for d, t in pts]
        return max((ci - cj) / (ti + tj) for ci, ti in c for cj, tj in c)

    lo, hi = 0.0, 2.0 * max(t for _, t in pts) / max(max(d for d, _ in pts), 1)
    for _ in range(200):
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if dev_at(m1) <= dev_at(m2):
            hi = m2
        else:
            lo = m1
    b = (lo + hi) / 2
    e = dev_at(b)
    a = max(t - b * d - e * t for d, t in pts)
    return a, b, e


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
        ba, bb, be = best_line(pts)
        bworst = max(pts, key=lambda p: abs(p[1] - (ba + bb * p[0])) / p[1])
        print(f"  best straight line: t = {ba:.2f} µs + {bb * 1e6:.3f} µs per 1M tokens, every "
              f"depth within {100 * be:.1f}% of it (largest at depth {bworst[0]}; "
              f"{'within' if be <= 0.10 else 'over'} 10%)")
        close = [(pts[i], pts[i + 1]) for i in range(n - 1)
                 if pts[i + 1][0] - pts[i][0] <= 2]
        for (d0, t0), (d1, t1) in close:
            print(f"  step {d0} -> {d1}: {t0:.2f} -> {t1:.2f} µs ({100 * (t1 / t0 - 1):+.1f}%)")


def self_test():
    """best_line against known answers: points on a line, a brute-force search that must not find
    a better line, and a three-point case solved by hand."""
    fails = []
    a, b, e = best_line([(d, 5.0 + 2e-3 * d) for d in (1024, 4096, 65536, 1 << 20)])
    if e > 1e-9 or abs(a - 5.0) > 1e-6 or abs(b - 2e-3) > 1e-9:
        fails.append(f"exact line: a {a} b {b} deviation {e}")
    # Three points (0, 1), (1, 1), (2, 4): by the alternation at three points the best line has
    # deviations +e, -e, +e relative to 1, 1, 4, i.e. a = 1 - e, a + b = 1 + e, a + 2b = 4 - 4e:
    # b = 2e, 1 - e + 4e = 4 - 4e, e = 3/7.
    a, b, e = best_line([(0, 1.0), (1, 1.0), (2, 4.0)])
    if abs(e - 3 / 7) > 1e-6:
        fails.append(f"three points: deviation {e}, expected {3 / 7}")
    pts = [(1024, 13.2), (4096, 18.1), (16384, 24.9), (262144, 126.4), (1 << 20, 433.1)]
    _, _, e = best_line(pts)
    grid = min(max(abs(t - (ga + gb * d)) / t for d, t in pts)
               for ga in [10 + 0.05 * i for i in range(200)]
               for gb in [3e-4 + 2e-6 * j for j in range(150)])
    if grid < e - 1e-4:
        fails.append(f"a grid line deviates {grid}, less than the best line's {e}")
    for f_ in fails:
        print("FAIL", f_)
    print("self-test:", "failed" if fails else "passed")
    return 1 if fails else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        sys.exit(self_test())
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main_table(rows(sys.argv[1]))
    if len(sys.argv) > 2:
        sweep(rows(sys.argv[2]))
