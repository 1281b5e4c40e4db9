# usage: cpustat.sh CMD...; prints wall, busy CPU-seconds, utilisation of all CPUs
read -r _ u n s i w q sq st _ < /proc/stat; b0=$((u+n+s+q+sq)); t0=$((u+n+s+i+w+q+sq+st)); s0=$(date +%s.%N)
"$@"; rc=$?
read -r _ u n s i w q sq st _ < /proc/stat; b1=$((u+n+s+q+sq)); t1=$((u+n+s+i+w+q+sq+st)); s1=$(date +%s.%N)
python3 -c "print(f'wall {$s1-$s0:.0f} s, busy {($b1-$b0)/100:.0f} CPU-s, utilisation {($b1-$b0)/($t1-$t0):.0%} of all CPUs')"
exit $rc
