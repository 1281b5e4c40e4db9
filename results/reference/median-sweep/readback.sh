# readback.sh LABEL: copy the accuracy grid's parts 20-27 to /tmp/rb/LABEL, rebuild their
# tables with this checkout's code (prediction_accuracy.py --analyse-only) and print part,
# workload, hook and measured / predicted, one cell a line. Run it at main (old.txt) and
# with median-sweep.patch applied (new.txt); summary.sh compares the two.
set -e
label=$1; cd "$(dirname "$0")/../../.."
rm -rf "/tmp/rb/$label"; mkdir -p "/tmp/rb/$label"
for p in 20 21 22 23 24 25 26 27; do
  cp -r "results/reference/accuracy-grid-$p" "/tmp/rb/$label/$p"
  ws=$(for d in "/tmp/rb/$label/$p"/*/; do [ -f "$d/accuracy.md" ] && basename "$d"; done | paste -sd,)
  python scripts/prediction_accuracy.py --grid scripts/accuracy-grid.tsv \
    --workloads "$ws" --nodes 2 --out "/tmp/rb/$label/$p" --analyse-only > /dev/null 2>&1 \
    || echo "part $p failed"
  for f in "/tmp/rb/$label/$p"/*/accuracy.md; do
    w=$(basename "$(dirname "$f")")
    grep -E "^\| [0-9]+ Gbit" "$f" | awk -F'|' -v p="$p" -v w="$w" \
      '{gsub(/ /,"",$3); gsub(/ /,"",$8); print p, w, $3, $8}'
  done
done
