# The measuring host on CPU 0, the neighbour on CPU 1, each mode SECONDS (default 5) in
# turn, CYCLES times (default 12) (OUT: default this directory). Nothing else should run
# meanwhile.
cd "$(dirname "$0")" || exit 1
out=${OUT:-.}
seconds=${SECONDS_EACH:-5}; cycles=${CYCLES:-12}
schedule=$(for _ in $(seq "$cycles"); do printf 'train:%s,import:%s,idle:%s,' "$seconds" "$seconds" "$seconds"; done)
schedule=${schedule%,}
OMP_NUM_THREADS=1 taskset -c 1 python worker.py neighbour "$schedule" "$out/neighbour.json" &
sleep 1
OMP_NUM_THREADS=1 taskset -c 0 python worker.py measure "$(( 3 * seconds * cycles - 2 ))" "$out/measured.json"
wait
