#!/usr/bin/env bash
PY=/work/main/.venv/bin/python
for w in "$@"; do
  RANK=1 taskset -c 1 $PY ./paired.py $w > /dev/null 2>&1 & other=$!
  RANK=0 taskset -c 0 $PY ./paired.py $w 2>&1 | grep -v -i warn
  wait $other
done
