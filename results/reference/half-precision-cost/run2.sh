# probe2.py for each dtype twice, in turn; every line of output goes to stdout (runs2*.log).
# DTYPES (default "float16 bfloat16 float32"), ROUNDS and CPUS pass through.
cd "$(dirname "$0")" || exit 1
for pass in 1 2; do
  for dtype in ${DTYPES:-float16 bfloat16 float32}; do
    echo "# $dtype, pass $pass"
    ROUNDS=${ROUNDS:-4} DTYPE=$dtype CPUS=${CPUS:-} SCRIPT=probe2.py python lab.py 2 2>/dev/null
  done
done
