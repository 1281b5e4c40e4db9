# Each dtype twice, in turn; every line of output goes to stdout (runs.log).
# ROUNDS passes through to probe.py.
cd "$(dirname "$0")" || exit 1
for pass in 1 2; do
  for dtype in ${DTYPES:-float16 bfloat16}; do
    echo "# $dtype, pass $pass"
    ROUNDS=${ROUNDS:-4} DTYPE=$dtype CPUS=${CPUS:-} python lab.py 2 2>/dev/null
  done
done
