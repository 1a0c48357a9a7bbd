#!/usr/bin/env python3
"""kvflash-bench CSV rows of paged and contiguous caches as one table: a row per (K/V, heads, D,
depth), a column per page size (0 = contiguous), µs per call (median) and the ratio to
contiguous."""
import csv
import re
import sys


def main(path):
    rows = list(csv.DictReader(open(path)))
    table, sizes = {}, set()
    for r in rows:
        m = re.search(r"paged (\d+)", r["test"])
        ps = int(m.group(1)) if m else 0
        sizes.add(ps)
        key = (f'{r["k_type"]}/{r["v_type"]}', f'{r["n_q_heads"]}/{r["n_kv_heads"]}',
               r["head_dim_k"], int(r["depth"]))
        table.setdefault(key, {})[ps] = float(r["us_median"])
    sizes = sorted(sizes)
    head = ["K/V", "heads", "D", "depth"] + [
        "contiguous µs" if s == 0 else f"page {s}: µs (x)" for s in sizes]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for key in sorted(table, key=lambda k: (k[0], k[1], k[2], k[3])):
        cells = list(key[:3]) + [str(key[3])]
        base = table[key].get(0)
        for s in sizes:
            us = table[key].get(s)
            if us is None:
                cells.append("—")
            elif s == 0 or base is None:
                cells.append(f"{us:.1f}")
            else:
                cells.append(f"{us:.1f} ({us / base:.2f})")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
