# probe.py for each dtype twice, in turn, on two emulated hosts at 5 Gbit/s, one CPU each
# (../half-precision-cost/lab.py); every line of output goes to stdout (runs*.log).
# DTYPES (default "float16 float32"), ROUNDS, TRAIN_STEPS, MODEL, BATCH, IMAGE, MLP, RATE
# and CPUS pass through.
cd "$(dirname "$0")" || exit 1
for pass in 1 2; do
  for dtype in ${DTYPES:-float16 float32}; do
    echo "# $dtype, pass $pass"
    ROUNDS=${ROUNDS:-6} DTYPE=$dtype SCRIPT="$PWD/probe.py" \
      python ../half-precision-cost/lab.py 2 2>/dev/null
  done
done
