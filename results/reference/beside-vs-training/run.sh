# Each placement twice, in turn; every line of output goes to stdout (runs*.log).
# PLACEMENTS: lab.py's arguments, comma-separated (default "2 4 busy,3 4 busy,4 4").
# ROUNDS, KEEP and FREE pass through to probe.py.
cd "$(dirname "$0")/../compute-taken" || exit 1
IFS=, read -r -a placements <<< "${PLACEMENTS:-2 4 busy,3 4 busy,4 4}"
for pass in 1 2; do
  for placement in "${placements[@]}"; do
    echo "# $placement, pass $pass, KEEP=${KEEP:-0}, FREE=${FREE:-0}"
    # shellcheck disable=SC2086  # the placement is lab.py's words
    ROUNDS=${ROUNDS:-6} KEEP=${KEEP:-0} FREE=${FREE:-0} \
      SCRIPT=../beside-vs-training/probe.py python lab.py $placement 2>/dev/null
  done
done
