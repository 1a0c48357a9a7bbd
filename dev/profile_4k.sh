#!/usr/bin/env bash
# usage: dev/profile_4k.sh OUT BENCH  -- ncu source pages of decode at 4K for f16 and q4_0
out=$1; bench=$2
for t in f16 q4_0; do
  ncu --clock-control none --cache-control none -k regex:decode_kernel -s 3 -c 1 --set full --import-source yes \
    -o "$out/k4_$t" "$bench" --backend cuda -ctk $t -d 4096 -r 3 --warmup 1 --no-progress > "$out/ncu_$t.txt" 2>&1
  ncu -i "$out/k4_$t.ncu-rep" --page source --csv --print-source sass > "$out/k4_${t}_sass.csv" 2>/dev/null
  ncu -i "$out/k4_$t.ncu-rep" --page details > "$out/k4_${t}_details.txt" 2>/dev/null
  gzip -f "$out/k4_${t}_sass.csv"; rm -f "$out/k4_$t.ncu-rep"
done
