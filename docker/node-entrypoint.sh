#!/bin/sh
# One node of a job: torchrun with this node's rank, then the trainer with BENCH_ARGS.
# The argv is bench.host.contract.torchrun_argv's (tests/test_contract.py holds the two together).
# With arguments, runs them instead (e.g. `docker run IMAGE python -m bench --help`).
set -eu
if [ "$#" -gt 0 ]; then exec "$@"; fi
# On Kubernetes the pod's place comes from the cluster where the contract's variable is unset:
# an Indexed Job sets JOB_COMPLETION_INDEX; Kubeflow's PyTorchJob operator sets MASTER_ADDR,
# MASTER_PORT, RANK (the pod's node rank) and WORLD_SIZE (pods; pods x processes once it also
# sets PET_NNODES, PET_NODE_RANK, PET_NPROC_PER_NODE, which come first). See
# bench/host/launchers/k8s/.
: "${NNODES:=${PET_NNODES:-${WORLD_SIZE:-1}}}" "${NPROC_PER_NODE:=${PET_NPROC_PER_NODE:-1}}"
: "${NODE_RANK:=${JOB_COMPLETION_INDEX:-${PET_NODE_RANK:-${RANK:-0}}}}"
: "${MASTER_ADDR:=${PET_MASTER_ADDR:-127.0.0.1}}" "${MASTER_PORT:=${PET_MASTER_PORT:-29500}}"
: "${RESULTS_FILE:=/results/runs.jsonl}"
: "${RDZV_TIMEOUT:=600}"
# A node simulated beside others on one GPU host: only its own GPUs, numbered as nvidia-smi does.
if [ -n "${BENCH_GPUS:-}" ]; then
  export CUDA_VISIBLE_DEVICES="$BENCH_GPUS" CUDA_DEVICE_ORDER=PCI_BUS_ID
fi
echo "bench-node: node $NODE_RANK of $NNODES, $NPROC_PER_NODE process(es), master $MASTER_ADDR:$MASTER_PORT" >&2
# BENCH_ARGS carries the workload's flags as one shell-quoted string (bench.host.contract
# writes it with shlex.join; a hand-written .env may give plain words). Python's shlex splits
# it back into exactly those words (it parses only: nothing is expanded, globbed or run) and
# quotes each for `set --`, so a flag with a blank, a quote or a '*' arrives whole.
if ! words=$(python3 -c 'import shlex, sys; print(shlex.join(shlex.split(sys.argv[1])))' 2>/dev/null \
    "${BENCH_ARGS:-}"); then
  echo "bench-node: BENCH_ARGS cannot be split into words (an unbalanced quote?): fix it in" \
    "the settings file" >&2
  exit 2
fi
eval "set -- $words"
# bench.rank.torchrun: torchrun that leaves at once when the job is over (no unwinding of torch).
exec python3 -m bench.rank.torchrun --nnodes "$NNODES" --node_rank "$NODE_RANK" --nproc_per_node "$NPROC_PER_NODE" \
  --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" \
  --rdzv-id "${BENCH_JOB_ID:-bench}" --rdzv-conf "timeout=$RDZV_TIMEOUT" \
  -m "${BENCH_MODULE:-bench.rank.train}" --results "$RESULTS_FILE" "$@"
