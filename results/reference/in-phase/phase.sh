#!/usr/bin/env bash
# Interleaved rounds of alone / free / lockstep for each workload; rank 0 on CPU 0, rank 1 on CPU 1.
PY=/work/main/.venv/bin/python
run() {  # mode, workload args...
  local mode=$1; shift
  if [ "$mode" = alone ]; then
    RANK=0 WORLD_SIZE=1 taskset -c 0 $PY ./phase.py alone "$@"
  else
    RANK=1 WORLD_SIZE=2 taskset -c 1 $PY ./phase.py "$mode" "$@" & other=$!
    RANK=0 WORLD_SIZE=2 taskset -c 0 $PY ./phase.py "$mode" "$@"
    wait $other
  fi
}
WL=("smallcnn 16 28" "mlp 32 28 1024 2")
for round in 1 2; do
  for w in "${WL[@]}"; do
    for mode in alone free lockstep; do
      echo "round $round: $(run $mode $w 2>&1 | grep -v Warning | tail -1)"
    done
  done
done
