# summary.sh: for old.txt and new.txt (readback.sh's outputs), the cells the tables mark
# outside 0.90-1.10 ("off", on the unrounded ratio), the mean ratio and its mean and rms
# distance from 1, and how many cells moved nearer to 1 or further (by more than 0.005).
cd "$(dirname "$0")" || exit 1
for f in old new; do
  awk -v f="$f" '{off += ($4 ~ /off/); r=$4; sub(/\*\*off\*\*/, "", r); s+=r; d=(r>1?r-1:1-r);
    a+=d; n++; ss+=(r-1)^2}
    END {printf "%s: %d cells, %d off, mean %.3f, mean |ratio - 1| %.3f, rms %.3f\n",
         f, n, off, s/n, a/n, sqrt(ss/n)}' "$f.txt"
done
paste -d' ' old.txt new.txt | awk '{a=$4; b=$8; sub(/\*\*off\*\*/, "", a); sub(/\*\*off\*\*/, "", b);
  da=(a>1?a-1:1-a); db=(b>1?b-1:1-b); if (db < da - 0.005) near++; else if (db > da + 0.005) far++}
  END {printf "median sweep against the latest: %d cells nearer 1, %d further\n", near, far}'
