#!/usr/bin/env python3
"""The basic blocks of one kernel's SASS, without a profiler run:

    cuobjdump -sass OBJ_OR_CUBIN > K.sass     (or: nvdisasm -c CUBIN > K.sass)
    dev/sass_blocks.py K.sass KERNEL_SUBSTRING [--min-mma 1] [--show ADDR ...]

Splits the kernel's code at branch targets and after branches, barriers and exits, and prints
one line per block: start address, instruction count, MMAs, shared-memory loads and stores, and
its branches. Blocks with at least --min-mma MMAs are the loop bodies to read first (a 16-key
step of the decode kernel is one K block, the softmax and one V block). --show ADDR prints the
block starting at hex address ADDR with an opcode histogram. Reads plain or .gz files; the
kernel's mangled name must contain KERNEL_SUBSTRING (the first match is used), e.g.
`KvTypeE4ELS3_4ELi1ELb0` for the one-token q4_0/q4_0 decode kernel. No cuobjdump here? Build the
cubin locally (`nvcc -cubin -arch=sm_90 ...`) and run cuobjdump in a short device call.
"""
import argparse
import collections
import gzip
import re

INS = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"^(\.L_x_\d+):")
TARGET = re.compile(r"(?:BRA|BRX|CALL\.REL|BSSY|SSY|PBK)\b.*?(0x[0-9a-f]+|\.L_x_\d+)")


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return f.read().split("\n")


def kernel_lines(lines, name):
    """The lines of the first function whose header (cuobjdump 'Function :' or nvdisasm
    '.text.NAME:') contains name."""
    start = None
    for i, line in enumerate(lines):
        header = "Function :" in line or (line.startswith(".text.") and line.rstrip().endswith(":"))
        if start is None and header and name in line:
            start = i + 1
        elif start is not None and header:
            return lines[start:i]
    if start is None:
        raise SystemExit(f"no kernel whose name contains {name!r}")
    return lines[start:]


def opcode(text):
    text = re.sub(r"^@!?U?P[T0-9]+\s+", "", text)
    return text.split()[0].split(".")[0] if text else ""


def blocks(body):
    ins, labels = [], {}
    pending = None
    for line in body:
        m = LABEL.match(line)
        if m:
            pending = m.group(1)
            continue
        m = INS.match(line)
        if m:
            addr = int(m.group(1), 16)
            if pending:
                labels[pending] = addr
                pending = None
            ins.append((addr, m.group(2)))
    leaders = {ins[0][0]} if ins else set()
    for k, (addr, text) in enumerate(ins):
        op = opcode(text)
        t = TARGET.search(text)
        if t and op in ("BRA", "BRX"):
            tgt = t.group(1)
            leaders.add(int(tgt, 16) if tgt.startswith("0x") else labels.get(tgt, -1))
        if op in ("BRA", "BRX", "EXIT", "BAR", "RET") and k + 1 < len(ins):
            leaders.add(ins[k + 1][0])
    out, cur = [], None
    for addr, text in ins:
        if addr in leaders or cur is None:
            cur = [addr, []]
            out.append(cur)
        cur[1].append(text)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sass")
    ap.add_argument("kernel")
    ap.add_argument("--min-mma", type=int, default=0, help="only blocks with this many MMAs")
    ap.add_argument("--show", nargs="*", default=[], help="hex start addresses to print")
    a = ap.parse_args()
    bl = blocks(kernel_lines(read(a.sass), a.kernel))
    total = sum(len(b[1]) for b in bl)
    print(f"{len(bl)} blocks, {total} instructions")
    show = {int(s, 16) for s in a.show}
    for addr, texts in bl:
        ops = collections.Counter(opcode(t) for t in texts)
        mma = ops["HMMA"] + ops["IMMA"] + ops["HGMMA"]
        if addr not in show and (mma < a.min_mma or (show and a.min_mma == 0)):
            continue
        br = [t for t in texts if opcode(t) in ("BRA", "BAR", "EXIT")]
        print(f"{addr:06x} n={len(texts):4d} mma={mma:2d} lds={ops['LDS'] + ops['LDSM']:3d} "
              f"sts={ops['STS']:2d} | {' ; '.join(b[:48] for b in br[:3])}")
        if addr in show:
            for t in texts:
                print("    " + t)
            print("    " + ", ".join(f"{k} {v}" for k, v in ops.most_common()))


if __name__ == "__main__":
    main()
