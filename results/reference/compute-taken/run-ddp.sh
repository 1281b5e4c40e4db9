#!/bin/bash
# DDP's own backward against the sweep-probe shape, on the grid's placements, in turn.
#   bash results/reference/compute-taken/run-ddp.sh > results/reference/compute-taken/ddp.log
cd "$(dirname "$0")"
PY=../../../.venv/bin/python
echo "# $(date -u +%FT%TZ) at $(git rev-parse --short HEAD), $(nproc) CPUs, torch $($PY -c 'import torch; print(torch.__version__)')"
for repeat in 1 2 3; do
  for placement in "2 4 busy" "3 4 busy" "4 4"; do
    echo "## repeat $repeat: SCRIPT=ddp.py python lab.py $placement"
    SCRIPT=ddp.py $PY lab.py $placement 2>&1 | grep -v "^\[W"
    echo "## repeat $repeat: SCRIPT=shape2.py python lab.py $placement"
    SCRIPT=shape2.py $PY lab.py $placement 2>&1 | grep -v "^\[W"
  done
done
