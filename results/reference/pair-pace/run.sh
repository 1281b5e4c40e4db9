# Both CPUs train the smallcnn at batch 16 at once, each step stamped; then each alone.
W=/work/main/results/reference/neighbour-state/worker.py
export OMP_NUM_THREADS=1
taskset -c 0 python $W measure ${BOTH:-90} both0.json &
taskset -c 1 python $W measure ${BOTH:-90} both1.json
wait
taskset -c 0 python $W measure ${ALONE:-30} alone0.json
taskset -c 1 python $W measure ${ALONE:-30} alone1.json
