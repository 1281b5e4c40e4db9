#!/usr/bin/env bash
# Re-predict stored accuracy runs with the one-node timeline's mean step less, per
# workload, the reducer work one rank pays beyond what a rank of an N-node job pays
# (what-if.patch, WHATIF_REDUCER=less.json, from summary.py --less) beside the committed
# model. Nothing is measured again. From the repository root:
#   bash results/reference/reducer-work/compare.sh > results/reference/reducer-work/compare.md
set -euo pipefail
repo=$(pwd)
here=results/reference/reducer-work
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/tree" >/dev/null 2>&1; rm -rf "$work"' EXIT
git worktree add --detach -q "$work/tree" HEAD
git -C "$work/tree" apply "$repo/$here/what-if.patch"
# set name, directory, node counts
sets=("part-ten results/reference/accuracy-grid-10 2"
      "nodes-2-run-1 results/reference/accuracy-grid-nodes-2/run-1 2,3,4"
      "nodes-2-run-2 results/reference/accuracy-grid-nodes-2/run-2 2,3,4"
      "nodes-3 results/reference/accuracy-grid-nodes-3 2,3,4"
      "cpu-placement-even results/reference/cpu-placement/even 2,4"
      "cpu-placement-shared results/reference/cpu-placement/shared 2,4")
echo "Each cell: measured / predicted (whether the measured median is inside the band)."
echo
echo "| set | workload | hook | nodes | as committed | less the reducer work N ranks do not pay |"
echo "|---|---|---|---|---|---|"
for entry in "${sets[@]}"; do
  read -r name dir nodes <<< "$entry"
  cp -r "$repo/$dir" "$work/$name"
  for anchor in "" less; do
    if [ -f "$work/$name/grid.md" ]; then
      WHATIF_REDUCER=${anchor:+$repo/$here/less.json} "$repo/.venv/bin/python" "$work/tree/scripts/prediction_accuracy.py" \
        --grid "$work/tree/scripts/accuracy-grid.tsv" --nodes "$nodes" --out "$work/$name" \
        --analyse-only > /dev/null 2>&1
      table="$work/$name/grid.md"
    else   # one workload's directory (the placement runs)
      WHATIF_REDUCER=${anchor:+$repo/$here/less.json} "$repo/.venv/bin/python" "$work/tree/scripts/prediction_accuracy.py" \
        --model smallcnn --batch-size 64 --links 1gbit --hooks none --nodes "$nodes" \
        --out "$work/$name" --analyse-only > /dev/null 2>&1
      table="$work/$name/accuracy.md"
    fi
    awk -F'|' -v c="${anchor:-committed}" '
      /^\| / && $0 !~ /---|workload|link \| hook/ {
        grid = ($0 ~ /`/); w = "-"
        if (grid) { split($2, parts, "`"); w = parts[2]; h = $5; n = $6; r = $10; b = $11 }
        else { h = $3; n = $4; r = $8; b = $9 }
        gsub(/ /, "", b)
        if (r ~ /[0-9]/) print c "|" w "|" h "|" n "|" r " (band: " b ")" }' "$table" > "$work/$name.${anchor:-committed}"
  done
  paste -d'|' "$work/$name.committed" <(cut -d'|' -f5 "$work/$name.less") |
    awk -F'|' -v s="$name" '{printf "| %s | %s | %s | %s | %s | %s |\n", s, $2, $3, $4, $5, $6}' |
    sed 's/  */ /g' | tee -a "$work/rows"
done
echo
awk -F'|' '{ for (c = 6; c <= 7; c++) { split($c, v, " "); total[c]++
               if (v[1] + 0 >= 0.895 && v[1] + 0 < 1.105 && $c !~ /off/) within[c]++
               if ($c ~ /band: yes/) band[c]++ } }
  END { split("as committed,less the reducer work N ranks do not pay", name, ",")
        for (c = 6; c <= 7; c++)
          printf "- %s: %d of %d within 0.90-1.10, %d of %d medians inside their band\n",
                 name[c - 5], within[c], total[c], band[c], total[c] }' "$work/rows"
