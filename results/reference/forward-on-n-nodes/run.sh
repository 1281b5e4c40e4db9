# probe.py on two emulated hosts at 5 Gbit/s, one CPU each (../half-precision-cost/lab.py),
# PASSES times (default 2); every line of output goes to stdout (runs*.log). MODEL, BATCH,
# MLP, STEPS, ROUNDS, RATE and CPUS pass through.
cd "$(dirname "$0")" || exit 1
for pass in $(seq 1 "${PASSES:-2}"); do
  echo "# ${MODEL:-smallcnn} batch ${BATCH:-16}, pass $pass"
  SCRIPT="$PWD/probe.py" python ../half-precision-cost/lab.py 2 2>/dev/null
done
