# The demo's workload on both CPUs at once, each step stamped, for ${SECONDS_BOTH:-900} s.
# PATH=/work/main/.venv/bin:$PATH bash run.sh
export OMP_NUM_THREADS=1
taskset -c 0 python pace.py ${SECONDS_BOTH:-900} pace0.json &
taskset -c 1 python pace.py ${SECONDS_BOTH:-900} pace1.json
wait
