#!/usr/bin/env bash
# Trains needle-model variants side by side on one GPU (the model is small: four runs share it)
# and keeps the one whose PyTorch needle accuracy is best: OUT/needle.gguf, its log
# OUT/train_best.txt, every log in OUT/logs.tgz. Each variant is scripts/model/train.py with the
# flags given (one quoted string per variant; default: the four below).
#   dev/train_needle_gpu.sh OUT [SECONDS] ["FLAGS" ...]
set -uo pipefail
out=${1:?usage: dev/train_needle_gpu.sh OUT [SECONDS] [FLAGS ...]}
secs=${2:-300}
shift $(( $# >= 2 ? 2 : 1 ))
cd "$(dirname "$0")/.."
mkdir -p "$out"
r=$(mktemp -d)
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(
  ""                                  # the script's defaults (drills, echo, skip-wise positions)
  "--lr 3e-3"
  "--drill 0.8 --drill-steps 3000"
  "--seq 256,512 --facts 3 --questions 3"
)
i=0
for v in "${variants[@]}"; do
  # shellcheck disable=SC2086  # the flags split into words on purpose
  python3 scripts/model/train.py --device cuda --steps 8000 --max-seconds "$secs" \
    --eval-depths 1024,4096,16384,32768 --eval-needles 10 --out "$r/$i.gguf" $v \
    > "$r/$i.txt" 2>&1 &
  i=$((i + 1))
done
wait
best=-1 bestn=-1
for j in $(seq 0 $((i - 1))); do
  n=$(grep needles "$r/$j.txt" | grep -o "[0-9]*/10" | cut -d/ -f1 | awk '{s+=$1} END {print s+0}')
  echo "== variant $j (${variants[$j]:-defaults}): $n needles"
  grep -E "needles|stopped" "$r/$j.txt"
  [ "$n" -gt "$bestn" ] && { best=$j; bestn=$n; }
done
cp "$r/$best.gguf" "$out/needle.gguf"
cp "$r/$best.txt" "$out/train_best.txt"
tar czf "$out/logs.tgz" -C "$r" .
echo "best: variant $best (${variants[$best]:-defaults}), $bestn needles"
