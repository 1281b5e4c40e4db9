#!/bin/bash
# DDP's backward in three arms in one run (ARMS=3: no_sync, noop hook, all-reduce), on the
# grid's placements, in turn:
#   bash results/reference/compute-taken/run-ddp3.sh > results/reference/compute-taken/ddp3.log
cd "$(dirname "$0")"
PY=../../../.venv/bin/python
echo "# $(date -u +%FT%TZ) at $(git rev-parse --short HEAD), $(nproc) CPUs, torch $($PY -c 'import torch; print(torch.__version__)')"
for repeat in 1 2 3; do
  for placement in "2 4 busy" "3 4 busy" "4 4"; do
    echo "## repeat $repeat: ARMS=3 SCRIPT=ddp.py python lab.py $placement"
    ARMS=3 SCRIPT=ddp.py $PY lab.py $placement 2>&1 | grep -v "^\[W"
  done
done
