# The sweep's beside-compute probe (bench allreduce --beside-compute, as the accuracy grid
# runs it, float16) and probe.py (float16) in turn, ROUNDS_EACH times, on two emulated
# hosts at 5 Gbit/s, one CPU each: do they read the same compute lost per call at the
# bucket's size when run minutes apart? Sweeps to SWEEPS (default sweeps.jsonl), probe
# lines to stdout (alternate.log).
cd "$(dirname "$0")" || exit 1
sweeps=${SWEEPS:-sweeps.jsonl}
for round in $(seq 1 "${ROUNDS_EACH:-4}"); do
  echo "# round $round: sweep"
  python -m bench matrix --launcher netns --link 5gbit --topologies 2x1 --repeats 1 \
    --workload allreduce --results "$sweeps" -- --min-size 256KiB --max-size 2MiB \
    --iters 10 --warmup-iters 2 --dtype float16 --beside-compute >&2
  echo "# round $round: probe"
  ROUNDS=4 TRAIN_STEPS=40 DTYPE=float16 SCRIPT="$PWD/probe.py" \
    python ../half-precision-cost/lab.py 2 2>/dev/null
done
