# idle_group.py under each GROUP in turn, PASSES times (default 2), on two emulated hosts
# at 5 Gbit/s, one CPU each (../half-precision-cost/lab.py); stdout: idle*.log.
cd "$(dirname "$0")" || exit 1
for pass in $(seq 1 "${PASSES:-2}"); do
  for group in none gloo gloo-used; do
    echo "# $group, pass $pass"
    GROUP=$group SCRIPT="$PWD/idle_group.py" python ../half-precision-cost/lab.py 2 2>/dev/null
  done
done
