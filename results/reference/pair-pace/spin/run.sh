python3 spin.py 0 work 64 > work.txt &
W=$!
: > phases.txt
for c in $(seq 1 16); do
  echo "$(date +%s.%N) idle" >> phases.txt; sleep 2
  python3 spin.py 1 burn & B=$!
  echo "$(date +%s.%N) busy" >> phases.txt; sleep 2
  kill $B; wait $B 2>/dev/null
done
echo "$(date +%s.%N) end" >> phases.txt
wait $W
