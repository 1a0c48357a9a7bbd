#!/usr/bin/env python3
"""Where a kernel's warps stall, from Nsight Compute's source page as CSV:

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > K.csv
    dev/sass_profile.py K.csv [--top N]

Splits the SASS into prologue (before the first HMMA), main loop and epilogue (after the last
HMMA) and prints, per region, the share of warp-stall samples, instructions executed and the top
stall reasons; then the N instructions with the most samples. Reads .csv or .csv.gz.
"""
import argparse
import collections
import csv
import gzip


def rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        r = list(csv.reader(f))
    # The first row names the kernel; the header is the row that starts with "Address".
    h = next(i for i, row in enumerate(r) if row and row[0] == "Address")
    head = r[h]
    return r[0], head, [dict(zip(head, row)) for row in r[h + 1:] if len(row) == len(head)]


def num(s):
    try:
        return float(s.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    kernel, head, ins = rows(a.csv)
    stalls = [c for c in head if c.startswith("stall_") and "Not Issued" not in c]
    mma = [i for i, x in enumerate(ins) if "HMMA" in x["Source"] or "IMMA" in x["Source"]]
    first, last = (mma[0], mma[-1]) if mma else (len(ins), len(ins))
    region = lambda i: "prologue" if i < first else ("epilogue" if i > last else "main loop")
    total = sum(num(x["Warp Stall Sampling (All Samples)"]) for x in ins) or 1.0
    total_exec = sum(num(x["Instructions Executed"]) for x in ins) or 1.0
    print(f"{kernel[1] if len(kernel) > 1 else kernel[0]}: {len(ins)} SASS instructions, "
          f"{total:.0f} warp samples, {total_exec:.0f} warp instructions executed\n")
    print("| region | SASS lines | share of samples | share of executed | top stall reasons (samples) |")
    print("|---|---:|---:|---:|---|")
    for name in ("prologue", "main loop", "epilogue"):
        sel = [x for i, x in enumerate(ins) if region(i) == name]
        s = sum(num(x["Warp Stall Sampling (All Samples)"]) for x in sel)
        e = sum(num(x["Instructions Executed"]) for x in sel)
        c = collections.Counter()
        for x in sel:
            for k in stalls:
                c[k[6:]] += num(x[k])
        top = ", ".join(f"{k} {v:.0f}" for k, v in c.most_common(5) if v > 0)
        print(f"| {name} | {len(sel)} | {100 * s / total:.0f}% | {100 * e / total_exec:.0f}% | {top} |")
    print(f"\nTop {a.top} instructions by samples:\n")
    print("| line | region | instruction | samples | executed | top stalls |")
    print("|---:|---|---|---:|---:|---|")
    order = sorted(range(len(ins)), key=lambda i: -num(ins[i]["Warp Stall Sampling (All Samples)"]))
    for i in order[:a.top]:
        x = ins[i]
        c = sorted(((num(x[k]), k[6:]) for k in stalls), reverse=True)
        top = ", ".join(f"{k} {v:.0f}" for v, k in c[:3] if v > 0)
        src = " ".join(x["Source"].split())[:60]
        print(f"| {i} | {region(i)} | `{src}` | {num(x['Warp Stall Sampling (All Samples)']):.0f} | "
              f"{num(x['Instructions Executed']):.0f} | {top} |")


if __name__ == "__main__":
    main()
