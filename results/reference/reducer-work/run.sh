#!/bin/bash
# reducer.py over the grid's workloads: one rank beside a busy neighbour (the one-node
# cell's placement), then 2 ranks beside busy neighbours and 4 ranks 2 per CPU (the 2- and
# 4-node cells' placements), in turn:
#   bash results/reference/reducer-work/run.sh > results/reference/reducer-work/reducer.log
cd "$(dirname "$0")"
PY=../../../.venv/bin/python
echo "# $(date -u +%FT%TZ) at $(git rev-parse --short HEAD), $(nproc) CPUs, torch $($PY -c 'import torch; print(torch.__version__)')"
WORKLOADS=${WORKLOADS:-"smallcnn:64:- mlp:64:512x8 resnet18:8:32 mlp:8:2048x2 resnet18:32:32 vit_tiny:16:- mlp:32:1024x2 smallcnn:16:-"}
for workload in $WORKLOADS; do
  IFS=: read -r model batch shape <<< "$workload"
  export MODEL=$model BATCH=$batch SHAPE=$shape
  echo "## $model batch $batch shape $shape: one rank beside a busy neighbour"
  (while true; do taskset -c 1 $PY ../compute-taken/spin.py; done) &
  spinner=$!
  sleep 1
  taskset -c 1 $PY reducer.py 2>&1 | grep -v "^\[W"
  kill $spinner; pkill -f compute-taken/spin.py; wait $spinner 2>/dev/null
  for placement in "2 4 busy" "4 4"; do
    echo "## $model batch $batch shape $shape: SCRIPT=reducer.py lab.py $placement"
    SCRIPT=../reducer-work/reducer.py $PY ../compute-taken/lab.py $placement 2>&1 | grep -v "^\[W"
  done
done
echo "# done $(date -u +%FT%TZ)"
