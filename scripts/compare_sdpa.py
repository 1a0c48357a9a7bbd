#!/usr/bin/env python3
"""compare_sdpa.py: kvflash-bench next to PyTorch SDPA, one markdown table per shape.

    python3 scripts/compare_sdpa.py bench_cuda.csv bench_sdpa.csv > compare_sdpa.md

Inputs: the CSV of `kvflash-bench -o csv` (columns backend, kernel, k_type, v_type, n_q_heads,
n_kv_heads, head_dim_k, head_dim_v, batch, depth, n_q, ..., us_median, us_min, us_max, kv_bytes,
gbps, ...) and the CSV of scripts/bench_sdpa.py (backend, dtype, q_heads, kv_heads, head_dim_k,
head_dim_v, depth, q_tokens, gqa, us_median, ..., gbps, status, mask, ...). Either may be missing
or empty (kvflash-bench writes nothing when it has no kernel for the backend): the tables then
show what the other has.

A shape is (query heads / KV heads, head dims, query tokens, depth, batch). Per shape: the SDPA
rows (one per backend and dtype, with how GQA and the causal mask were expressed, or why the point
did not run), then the kvflash rows (one per backend, kernel and K/V type pair) with their µs and
KV GB/s and the ratios SDPA time / kvflash time against the fastest SDPA configuration and against
each SDPA configuration that ran (> 1: kvflash is faster). GB/s counts each implementation's own
unique KV bytes, so a 4-bit K/V is expected to run at a lower GB/s and a higher ratio than f16.
A summary table at the end gives, per shape, the fastest SDPA and the fastest kvflash rows.

Standard library only. Exit codes: 0 a table was printed, 1 neither file had a row, 2 usage.
"""

import csv
import os
import sys

KVFLASH_NEED = ["backend", "kernel", "k_type", "v_type", "n_q_heads", "n_kv_heads", "head_dim_k",
                "head_dim_v", "depth", "n_q", "us_median"]
SDPA_NEED = ["backend", "dtype", "q_heads", "kv_heads", "head_dim_k", "head_dim_v", "depth",
             "q_tokens", "us_median", "status"]


def read_csv(path, need):
    """Rows as dicts, from the first line that holds the header (anything before it, such as a
    log line, is skipped). Returns (rows, note) where note says what went wrong, if anything."""
    if not os.path.exists(path):
        return [], "no such file"
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        header = next(csv.reader([line]), [])
        if all(c in header for c in need):
            rows = [r for r in csv.DictReader(lines[i:]) if any((v or "").strip()
                                                                for v in r.values())]
            return rows, None if rows else "header only, no rows"
    if not any(line.strip() for line in lines):
        return [], "empty"
    return [], f"no header with the columns {', '.join(need)}"


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def integer(text, default=0):
    v = num(text)
    return int(v) if v is not None else default


def fmt_us(v):
    return "—" if v is None else (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def fmt_gbps(v):
    return "—" if v is None else (f"{v:.1f}" if v < 100 else f"{v:.0f}")


def fmt_ratio(sdpa_us, this_us):
    if sdpa_us is None or not this_us:
        return ""
    return f"{sdpa_us / this_us:.2f}"


def shape_key_kvflash(r):
    return (integer(r["n_q_heads"]), integer(r["n_kv_heads"]), integer(r["head_dim_k"]),
            integer(r["head_dim_v"]), integer(r["n_q"]), integer(r["depth"]),
            integer(r.get("batch"), 1))


def shape_key_sdpa(r):
    return (integer(r["q_heads"]), integer(r["kv_heads"]), integer(r["head_dim_k"]),
            integer(r["head_dim_v"]), integer(r["q_tokens"]), integer(r["depth"]), 1)


def shape_title(key):
    hq, hkv, dk, dv, n, depth, batch = key
    d = f"{dk}" if dk == dv else f"{dk}/{dv}"
    test = "decode" if n == 1 else f"spec {n}" if n <= 8 else f"prefill {n}"
    b = f" · batch {batch}" if batch != 1 else ""
    return f"heads {hq}/{hkv} · D {d} · {test} (n {n}) · depth {depth}{b}"


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(header, rows, right):
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def sdpa_label(r):
    return f"{r['backend']} {r['dtype']}"


def kvflash_label(r):
    kv = r["k_type"] if r["k_type"] == r["v_type"] else f"{r['k_type']}/{r['v_type']}"
    return kv


def us_range(r):
    med, lo, hi = num(r.get("us_median")), num(r.get("us_min")), num(r.get("us_max"))
    if med is None:
        return "—"
    if lo is None or hi is None:
        return fmt_us(med)
    return f"{fmt_us(med)} ({fmt_us(lo)}-{fmt_us(hi)})"


def timed(r):
    return r.get("status", "") == "ok" and num(r.get("us_median")) is not None


def sdpa_ok(r):
    """An SDPA row that ran (bench_sdpa.py --kvflash rows, backend kvflash, are not SDPA)."""
    return r.get("backend") != "kvflash" and timed(r)


def compare(kv_rows, sdpa_rows):
    shapes = {}
    for r in kv_rows:
        shapes.setdefault(shape_key_kvflash(r), ([], []))[0].append(r)
    for r in sdpa_rows:
        shapes.setdefault(shape_key_sdpa(r), ([], []))[1].append(r)

    out = []
    summary = []
    for key in sorted(shapes):
        kvs, sds = shapes[key]
        ok = [r for r in sds if sdpa_ok(r)]
        # One ratio column per SDPA configuration that ran (the last row of a repeated one wins).
        configs = {}
        for r in ok:
            configs[sdpa_label(r)] = num(r["us_median"])
        fastest = min(ok, key=lambda r: num(r["us_median"])) if ok else None
        ratio_cols = []
        if kvs and fastest is not None:
            ratio_cols = [("vs fastest SDPA", num(fastest["us_median"]))]
            ratio_cols += [(f"vs {label}", us) for label, us in configs.items()]
        header = ["impl", "K/V", "detail", "µs (min-max)", "KV GB/s"] + [c for c, _ in
                                                                          ratio_cols]
        right = set(range(3, len(header)))
        rows = []
        for r in sds:
            python = r["backend"] == "kvflash"  # through the Python package, same process
            if timed(r):
                detail = (f"{r.get('kernel') or '?'}, Python package" if python else
                          f"gqa {r.get('gqa') or '?'}, mask {r.get('mask') or '?'}")
            else:
                status = r.get("status") or "no result"
                detail = status if len(status) <= 90 else status[:87] + "..."
            us = num(r.get("us_median")) if timed(r) else None
            rows.append(["kvflash python" if python else f"SDPA {r['backend']}", r["dtype"],
                         detail, us_range(r), fmt_gbps(num(r.get("gbps"))) if timed(r) else "—"]
                        + [fmt_ratio(s, us) if python and us else "" for _, s in ratio_cols])
        for r in kvs:
            us = num(r["us_median"])
            detail = r["kernel"]
            if integer(r.get("threads")) > 0 and r["backend"] == "cpu":
                detail += f", {integer(r.get('threads'))} threads"
            rows.append([f"kvflash {r['backend']}", kvflash_label(r), detail, us_range(r),
                         fmt_gbps(num(r.get("gbps")))]
                        + [fmt_ratio(s, us) for _, s in ratio_cols])
        out.append(f"### {shape_title(key)}\n")
        out.append(md_table(header, rows, right))
        if not kvs:
            out.append("\n(no kvflash-bench row for this shape)")
        elif not ok:
            out.append("\n(no SDPA configuration ran for this shape: no ratio)")
        out.append("")

        kv_ok = [r for r in kvs if num(r["us_median"]) is not None]
        best_kv = min(kv_ok, key=lambda r: num(r["us_median"])) if kv_ok else None
        f16 = next((r for r in kv_ok if r["k_type"] == "f16" and r["v_type"] == "f16"), None)
        f_us = num(fastest["us_median"]) if fastest else None
        summary.append([
            shape_title(key),
            f"{sdpa_label(fastest)}: {fmt_us(f_us)}" if fastest else "—",
            f"{fmt_us(num(f16['us_median']))} ({fmt_ratio(f_us, num(f16['us_median'])) or '—'})"
            if f16 else "—",
            f"{kvflash_label(best_kv)}: {fmt_us(num(best_kv['us_median']))} "
            f"({fmt_ratio(f_us, num(best_kv['us_median'])) or '—'})" if best_kv else "—",
        ])
    out.append("### Summary: fastest SDPA against kvflash (ratio = SDPA µs / kvflash µs, > 1: "
               "kvflash is faster)\n")
    out.append(md_table(["shape", "fastest SDPA µs", "kvflash f16/f16 µs (ratio)",
                         "fastest kvflash K/V µs (ratio)"], summary, {1, 2, 3}))
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 2 or argv[0] in ("-h", "--help"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        print("usage: compare_sdpa.py KVFLASH_BENCH.csv BENCH_SDPA.csv", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    kv_rows, kv_note = read_csv(argv[0], KVFLASH_NEED)
    sdpa_rows, sdpa_note = read_csv(argv[1], SDPA_NEED)
    print("## kvflash-bench vs PyTorch scaled_dot_product_attention\n")
    print(f"kvflash-bench: {len(kv_rows)} rows from `{argv[0]}`"
          f"{f' ({kv_note})' if kv_note else ''}; SDPA: {len(sdpa_rows)} rows from "
          f"`{argv[1]}`{f' ({sdpa_note})' if sdpa_note else ''}.")
    print("µs = median time per call (min-max); KV GB/s = the implementation's unique KV bytes / "
          "median time; \"vs X\" = X's µs / this row's µs (> 1: kvflash is faster).\n")
    if not kv_rows and not sdpa_rows:
        print("Nothing to compare.")
        return 1
    sys.stdout.write(compare(kv_rows, sdpa_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
