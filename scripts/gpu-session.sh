#!/usr/bin/env bash
# One lent GPU, one call: the checks issues 27 and 28 need a device for, most needed first,
# each under its own time limit, inside one overall deadline (a step that would not end
# before it is skipped and logged as not run). Natively, with the machine's own python3.
#
#   scripts/gpu-session.sh WORKDIR [PACKED.tar.gz]
#
#  1. provenance: the GPU's power limit, clocks, ECC, MIG, PCIe link, topology, the torch,
#     CUDA and NCCL this python3 loads, the InfiniBand userspace present (issue 28)
#  2. NCCL's own INFO log of an all-reduce (the transport lines the transport check reads)
#  3. `bench accept --stages preflight,device` (the figures the reference table is built
#     from: matmul per precision, memory and host-to-device bandwidth, training)
#  4. ResNet-50 bf16 channels-last batch 256: the trainer and the bare loop, eager
#  5. scripts/profile_step.py: bare, one-rank DDP and the traffic probe, alternated, with
#     torch.profiler tables and traces (issue 28: the probe's 4.3-4.7 ms)
#  6. the same, compiled (torch.compile, default mode)
#  7. ViT-B/16 bf16 eager (MFU)
#  8. a precision x batch sweep through the matrix, with energy per sample
# Every step's log, record and the step list go under WORKDIR; PACKED, when given, is
# rewritten after each step, so whatever ran comes back even if the call is cut short.
# DEADLINE_S (default 480) bounds the whole script; PYTHON (python3) runs everything; SKIP
# names steps not to run (e.g. those a first call of the same tree already ran).
set -uo pipefail
work=${1:?usage: scripts/gpu-session.sh WORKDIR [PACKED.tar.gz]}
packed=${2:-}
py=${PYTHON:-python3}
deadline=$((SECONDS + ${DEADLINE_S:-480}))
mkdir -p "$work"
cd "$(dirname "$0")/.."

pack() {
  [[ -n $packed ]] && tar czf "$packed.part" -C "$work" . && mv "$packed.part" "$packed"
  [[ -n $packed ]] && cp "$work/steps.log" "$(dirname "$packed")/steps.log"
  return 0
}

step() {  # step NAME LIMIT_S CMD...: run under its limit if the deadline allows, log, go on
  local name=$1 limit=$2; shift 2
  if [[ " ${SKIP:-} " == *" $name "* ]]; then
    echo "== $name: skipped (SKIP)" | tee -a "$work/steps.log"; return
  fi
  local left=$((deadline - SECONDS))
  if ((left < limit / 2)); then
    echo "== $name: not run, $left s left of the session (needs about $limit)" \
      | tee -a "$work/steps.log"
    return
  fi
  ((limit > left)) && limit=$left
  echo "== $name (limit $limit s): $*" | tee -a "$work/steps.log"
  local start=$SECONDS
  if declare -F "$1" >/dev/null; then  # a function of this script: quick, no limit
    "$@" >"$work/$name.log" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" >"$work/$name.log" 2>&1
  fi
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s" | tee -a "$work/steps.log"
  tail -n 4 "$work/$name.log"
  pack
}

provenance() {
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,power.default_limit,\
clocks.max.sm,clocks.applications.graphics,clocks.applications.memory,ecc.mode.current,\
mig.mode.current,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,\
pcie.link.width.max,compute_mode,persistence_mode --format=csv
  nvidia-smi topo -m
  nvidia-smi -q -d CLOCK,POWER,PERFORMANCE,ECC
  "$py" -c 'import torch, torchvision, platform; print("torch", torch.__version__,
"cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())),
"torchvision", torchvision.__version__, "python", platform.python_version(),
"bf16", torch.cuda.is_bf16_supported(), "capability", torch.cuda.get_device_capability())'
  echo "cpus $(nproc)"
  echo "tree ${BENCH_GIT_COMMIT:-unknown} dirty ${BENCH_GIT_DIRTY:-unknown} diff ${BENCH_GIT_DIFF_SHA256:-none}"
  echo "--- InfiniBand userspace and devices"
  ls /sys/class/infiniband 2>&1
  command -v ibv_devinfo || echo "no ibv_devinfo"
  ldconfig -p | grep -E 'libibverbs|librdmacm|libmlx5' || echo "no verbs libraries"
  echo "--- NVSwitch fabric manager"
  command -v nv-fabricmanager || echo "no nv-fabricmanager"
  ls /dev/nvidia-nvswitch* 2>&1 | head -3
}

step provenance 30 provenance

step nccl-info 60 env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV,TUNING \
  "$py" -m bench allreduce --device cuda --backend nccl --max-size 16MiB \
  --results "$work/allreduce.jsonl"

step accept 120 "$py" -m bench accept --launcher native --nodes 1 --device cuda \
  --stages preflight,device --out "$work/accept"

common=(--model resnet50 --image-size 224 --batch-size 256 --precision bf16 --channels-last)
step trainer-eager 60 "$py" -m bench train --device cuda "${common[@]}" --warmup-steps 20 \
  --steps 100 --log-every 0 --results "$work/trainer.jsonl"
step bare-eager 45 "$py" scripts/plain_ddp_loop.py --device cuda "${common[@]}" \
  --warmup-steps 20 --steps 100

step profile 90 "$py" scripts/profile_step.py --device cuda "${common[@]}" --steps 20 \
  --rounds 3 --profile-steps 3 --out "$work/profile"

step trainer-compiled 200 "$py" -m bench train --device cuda "${common[@]}" --compile \
  --warmup-steps 20 --steps 100 --log-every 0 --results "$work/compiled.jsonl"

step vit-eager 60 "$py" -m bench train --device cuda --model vit_b_16 --batch-size 128 \
  --precision bf16 --warmup-steps 10 --steps 30 --log-every 0 --results "$work/vit.jsonl"

step sweep 120 "$py" -m bench matrix --launcher native --topologies 1x1 \
  --models resnet50 --precisions tf32,bf16 --batch-sizes 128,256 --repeats 1 \
  --results "$work/sweep.jsonl" -- --device cuda --channels-last --steps 30 --warmup-steps 10

"$py" - "$work" <<'PYEOF' | tee "$work/summary.txt"
import json, sys, pathlib
root = pathlib.Path(sys.argv[1])
for path in sorted(root.rglob("*.jsonl")):
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        print(path.name, r.get("status"), r.get("model"), r.get("precision"),
              r.get("batch_size"), r.get("samples_per_s"), r.get("mfu"),
              r.get("energy_per_sample_j") or (r.get("telemetry") or {}).get("energy_per_sample_j"),
              r.get("error"))
PYEOF
pack
echo "== done, $((deadline - SECONDS)) s to spare" | tee -a "$work/steps.log"
pack
