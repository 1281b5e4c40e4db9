#!/usr/bin/env bash
# A real Slurm cluster with two compute nodes on this one machine, for tests and for trying
# `make bench-slurm` without a cluster: Debian's slurmctld, slurmd and munge (Slurm 22.05).
#
#   scripts/slurm-cluster.sh start    install what is missing, start munged, slurmctld and
#                                     two slurmd (node1, node2); wait until both answer
#                                     (a no-op when it is up; restarts it if slurm.conf changed)
#   scripts/slurm-cluster.sh stop     cancel its jobs, stop the daemons it started (pid
#                                     files in the state directory): nothing is left running
#   scripts/slurm-cluster.sh status   which daemons run, then sinfo (exit 1 when it is down)
#   scripts/slurm-cluster.sh env      the one line a caller needs: export SLURM_CONF=...
#   scripts/slurm-cluster.sh install  only install the missing Debian packages (slurmctld,
#                                     slurmd, slurm-client, munge; no service is started)
#
# Settings (environment):
#   BENCH_SLURM_DIR            state directory (default /var/lib/bench-slurm): slurm.conf,
#                              munge key and socket, pid files (run/), logs (log/), spools,
#                              saved state
#   BENCH_SLURM_PORT           slurmctld's port (default 6817); node1's and node2's slurmd
#                              listen on the next two. Clusters with their own directory and
#                              ports can run side by side (the tests start their own).
#   BENCH_SLURM_START_TIMEOUT  seconds `start` waits for both nodes (default 60)
#   BENCH_SLURM_CGROUP=1       proctrack/cgroup + task/cgroup (cgroup v1 memory controller
#                              needed) with memory as a consumable: a job over its --mem is
#                              killed and ends OUT_OF_MEMORY. Default 0: proctrack/linuxproc,
#                              task/none, no memory limits, works in any VM or container.
#   BENCH_SLURM_PIN=1          each slurmd held to its own CPU (taskset: node1 on the first
#                              CPU this script may use, node2 on the second, where there
#                              are two), which every job step it starts inherits: the two
#                              nodes do not take each other's CPU time, as two machines would
#                              not (what `bench accept` compares them on). Default 0: both
#                              nodes share every CPU.
#
# Two nodes: two slurmd on loopback (`slurmd -N node1`, `slurmd -N node2`). Debian's build
# is a multiple-slurmd one: slurm.conf has two NodeName lines with the same
# NodeAddr=127.0.0.1 and their own Port=, and each slurmd has its own spool, pid file and
# log (%n in the paths). SLURM_NODEID and SLURMD_NODENAME differ between the two tasks of
# `srun -N2`. A job's MASTER_ADDR (the first node's NodeAddr, as `scontrol show node`
# gives it) is 127.0.0.1, which every task and the head reach: a torchrun rendezvous
# between the two nodes works. (Network namespaces per node are not needed.)
#
# Nothing of a site's Slurm or munge is read or written: the daemons get `-f slurm.conf`
# and callers SLURM_CONF (see `env`); munged is our own, with its own key and socket under
# the state directory (AuthInfo=socket=... in slurm.conf, which srun, sbatch and the
# daemons follow; by hand: `munge -n -S $BENCH_SLURM_DIR/run/munge.socket`), so /etc/munge
# and a system munged are left alone. select/cons_tres, one partition `bench` (the
# default), KillWait=2, OverTimeLimit=0, batch_sched_delay=0 (a batch job starts within a
# second; only the first one after a cold start waits ~3 s for the scheduler's first pass).
#
# A finished job's state, reason and exit code. There is no accounting database
# (accounting_storage/none: plain `sacct` answers "Slurm accounting storage is disabled";
# slurmdbd with MariaDB would be too heavy for a test harness). Two sources instead:
#   - `scontrol show job -o JOBID` for MinJobAge (600 s) after the end:
#     JobState=COMPLETED|FAILED|TIMEOUT|CANCELLED|NODE_FAIL|OUT_OF_MEMORY,
#     Reason=None|NonZeroExitCode|TimeLimit|OutOfMemory|..., ExitCode=<rc>:<signal>
#     (exit 3: FAILED NonZeroExitCode 3:0; scancel: CANCELLED None 0:15; time limit:
#     TIMEOUT TimeLimit 0:15; over --mem with BENCH_SLURM_CGROUP=1: OUT_OF_MEMORY
#     OutOfMemory 0:125; a node whose slurmd dies: NODE_FAIL NodeDown, ~45 s later as
#     SlurmdTimeout=30, and JobRequeue=0 keeps such a job from being queued again) --
#     what bench/host/launchers/slurm.py reads first;
#   - the job-completion log (JobCompType=jobcomp/filetxt), kept for good, one line per
#     job: $BENCH_SLURM_DIR/log/jobcomp.txt with JobId= JobState= ExitCode= NodeList=
#     StartTime= EndTime= ... (no Reason). 22.05's `sacct -c` (--completion) reads it, with
#     the usual options: SLURM_CONF=... sacct -c -n -P -X -j JOBID -o State,ExitCode,NodeList
# Time limits are whole minutes and slurmctld checks them every 30 s (compiled in): a job
# with --time=1 ends TIMEOUT 60-90 s after its start (--time=0:05 is rounded up to 1
# minute). Faster: root sets a running job's limit to zero,
# `scontrol update JobId=ID TimeLimit=0`, and it ends TIMEOUT at the next check (<= 30 s).
set -euo pipefail

DIR=${BENCH_SLURM_DIR:-/var/lib/bench-slurm}
PORT=${BENCH_SLURM_PORT:-6817}
START_TIMEOUT=${BENCH_SLURM_START_TIMEOUT:-60}
CGROUP=${BENCH_SLURM_CGROUP:-0}
PIN=${BENCH_SLURM_PIN:-0}
CONF=$DIR/slurm.conf
RUN=$DIR/run
LOG=$DIR/log
KEYDIR=$DIR/munge-key
SOCKET=$RUN/munge.socket
NODES=(node1 node2)
# Every daemon starts with this in its environment: slurmstepd inherits it, so `stop`
# can find this cluster's leftover step daemons (and only them).
MARK="BENCH_SLURM_CLUSTER=$DIR"

say() { echo "slurm-cluster: $*" >&2; }
die() { say "error: $*"; exit 1; }
# A setting's wrong value: one line naming it (printf %q: a newline in it stays on the
# line), exit 2 before anything starts.
refuse() { say "error: $1=$(printf '%q' "$2"): $3"; exit 2; }

case "$PORT" in ''|*[!0-9]*) refuse BENCH_SLURM_PORT "$PORT" "a port number" ;; esac
case "$START_TIMEOUT" in
  ''|*[!0-9]*) refuse BENCH_SLURM_START_TIMEOUT "$START_TIMEOUT" "seconds" ;; esac
# The directory reaches slurm.conf's lines and the `env` line a caller evals: letters,
# digits and . _ - / only (a newline would add a line to slurm.conf, a $(...) would run).
case "$DIR" in
  /*[!A-Za-z0-9._/-]*|*/../*|*/..) refuse BENCH_SLURM_DIR "$DIR" \
    "an absolute path of letters, digits and . _ - / (no .. component)" ;;
  /*) ;;
  *) refuse BENCH_SLURM_DIR "$DIR" "an absolute path" ;;
esac
case "$CGROUP" in 0|1) ;; *) refuse BENCH_SLURM_CGROUP "$CGROUP" "0 or 1" ;; esac
case "$PIN" in 0|1) ;; *) refuse BENCH_SLURM_PIN "$PIN" "0 or 1" ;; esac

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

install_missing() {
  local missing=() pkg sudo=""
  for pkg in slurmctld slurmd slurm-client munge; do installed "$pkg" || missing+=("$pkg"); done
  if [ ${#missing[@]} -eq 0 ]; then return; fi
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get: install Slurm and munge by hand"
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "missing ${missing[*]}: run as root to install them"
    sudo="sudo"
  fi
  say "installing ${missing[*]}"
  # No service starts while they install (no system slurmctld, slurmd or munged is
  # wanted): the policy-rc.d of scripts/install-host.sh.
  local policy=/usr/sbin/policy-rc.d own_policy="" rc=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# scripts/slurm-cluster.sh: no service starts while it installs\nexit 101\n' \
      | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"; own_policy=1
  fi
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || {
    $sudo apt-get update -qq \
      && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  } || rc=$?
  if [ -n "$own_policy" ]; then $sudo rm -f "$policy"; fi
  [ "$rc" = 0 ] || die "apt-get install ${missing[*]} failed"
  # Under systemd the packages enable their units: this cluster runs its own daemons.
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    $sudo systemctl disable --quiet slurmctld slurmd munge 2>/dev/null || true
  fi
}

cpu_list() {  # the CPUs this script may run on, one a line (Cpus_allowed_list: 0-3,8)
  local part parts
  IFS=, read -ra parts <<<"$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)"
  for part in "${parts[@]}"; do
    if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done
}

node_cpu() {  # BENCH_SLURM_PIN=1: the CPU of node $1 (0-based), else nothing
  [ "$PIN" = 1 ] || return 0
  local cpus
  mapfile -t cpus < <(cpu_list)
  echo "${cpus[$1 % ${#cpus[@]}]}"
}

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

munge_ok() { munge -n -S "$SOCKET" 2>/dev/null | unmunge -S "$SOCKET" >/dev/null 2>&1; }

start_munge() {
  mkdir -p "$KEYDIR" "$RUN" "$LOG"
  # munged wants every directory above its socket searchable by all (mkdtemp gives 0700).
  chmod a+x "$DIR"
  chmod 700 "$KEYDIR"; chmod 755 "$RUN"
  if [ ! -s "$KEYDIR/munge.key" ]; then
    say "creating a munge key ($KEYDIR/munge.key)"
    (umask 077; head -c 1024 /dev/urandom > "$KEYDIR/munge.key.new")
    mv "$KEYDIR/munge.key.new" "$KEYDIR/munge.key"
  fi
  chmod 400 "$KEYDIR/munge.key"
  if alive "$RUN/munged.pid" && munge_ok; then return; fi
  alive "$RUN/munged.pid" && kill "$(cat "$RUN/munged.pid")" && sleep 0.5
  rm -f "$SOCKET" "$SOCKET.lock" "$RUN/munged.pid"
  env "$MARK" /usr/sbin/munged --socket="$SOCKET" --key-file="$KEYDIR/munge.key" \
    --pid-file="$RUN/munged.pid" --log-file="$LOG/munged.log" \
    --seed-file="$KEYDIR/munged.seed" </dev/null \
    || die "munged did not start: see $LOG/munged.log"
  for _ in $(seq 50); do munge_ok && return; sleep 0.1; done
  die "munged does not answer on $SOCKET: see $LOG/munged.log"
}

write_conf() {
  local cpus memory
  cpus=$(nproc)
  memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))  # MiB per node
  mkdir -p "$DIR/state" "$LOG" "$RUN"
  for node in "${NODES[@]}"; do mkdir -p "$DIR/spool-$node"; done
  local plugins
  if [ "$CGROUP" = 1 ]; then
    # Memory is a consumable and each job's RAM a cgroup (v1) limit: a job over its --mem
    # is killed and ends OUT_OF_MEMORY. A job without --mem gets its CPUs' share.
    [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ] || die "BENCH_SLURM_CGROUP=1 needs \
the cgroup v1 memory controller at /sys/fs/cgroup/memory, which this host has not got"
    plugins="ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((memory / cpus))"
    cat > "$DIR/cgroup.conf" <<EOF
# Written by scripts/slurm-cluster.sh (BENCH_SLURM_CGROUP=1). With two slurmd on one host
# the cgroups are per node: /sys/fs/cgroup/<controller>/slurm_node1, slurm_node2.
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
AllowedSwapSpace=0
EOF
  else
    plugins="ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectTypeParameters=CR_Core"
    rm -f "$DIR/cgroup.conf"
  fi
  local pinned="every CPU, shared"
  [ "$PIN" = 1 ] && pinned="node1 on CPU $(node_cpu 0), node2 on CPU $(node_cpu 1)"
  cat > "$CONF.new" <<EOF
# Written by scripts/slurm-cluster.sh: two compute nodes on this machine, on loopback.
# Rewritten by every start; daemons are restarted when it changes.
# The slurmd's CPUs (BENCH_SLURM_PIN=$PIN): $pinned.
ClusterName=bench
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool-%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
$plugins
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
MailProg=/bin/true
# Batch jobs start at once (the default delays them up to 3 s).
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
ReturnToService=2
# A finished job stays visible to scontrol this long: the launcher reads its end state.
MinJobAge=600
# Fast kills and no grace: a cancelled or timed-out job is gone within seconds.
KillWait=2
OverTimeLimit=0
InactiveLimit=0
# A batch job whose node fails ends NODE_FAIL instead of being queued again.
JobRequeue=0
SlurmdTimeout=30
MessageTimeout=10
# No accounting database; every finished job gets a line here (sacct -c reads it).
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.txt
NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT + 1)) CPUs=$cpus RealMemory=$memory State=UNKNOWN
NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT + 2)) CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=bench Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  if [ -f "$CONF" ] && cmp -s "$CONF" "$CONF.new"; then rm -f "$CONF.new"; return 1; fi
  mv "$CONF.new" "$CONF"
  return 0
}

node_states() { { SLURM_CONF=$CONF sinfo -h -N -p bench -o '%N %t' 2>/dev/null || true; } | sort -u; }

start() {
  install_missing
  start_munge
  local changed=""
  write_conf && changed=1
  local pidfile running=""
  for pidfile in "$RUN"/slurm*.pid "$DIR"/slurm*.pid; do alive "$pidfile" && running=1; done
  if [ -n "$changed" ] && [ -n "$running" ]; then
    say "slurm.conf changed: restarting the daemons"
    stop_daemons
  fi
  export SLURM_CONF=$CONF
  if ! alive "$RUN/slurmctld.pid"; then
    env "$MARK" slurmctld -f "$CONF" </dev/null || die "slurmctld did not start: see $LOG/slurmctld.log"
  fi
  local i pin node
  for i in "${!NODES[@]}"; do
    node=${NODES[$i]} pin=()
    [ "$PIN" = 1 ] && pin=(taskset -c "$(node_cpu "$i")")
    if ! alive "$RUN/slurmd-$node.pid"; then
      env "$MARK" "${pin[@]}" slurmd -f "$CONF" -N "$node" </dev/null \
        || die "slurmd -N $node did not start: see $LOG/slurmd-$node.log"
    fi
  done
  local deadline=$((SECONDS + START_TIMEOUT)) states up resumed=""
  while :; do
    states=$(node_states)
    # Up: each node answers (idle, or running jobs of an earlier start).
    up=$(grep -cE '^node[12] (idle|mix|alloc|comp)$' <<<"$states" || true)
    if [ "$up" = "${#NODES[@]}" ]; then
      say "up: node1 and node2 in partition bench (SLURM_CONF=$CONF)"
      return
    fi
    # A node left down or drained by an earlier unclean stop: resume it once.
    if [ -z "$resumed" ] && grep -qE '^node[12] (down|drain|drng|fail)' <<<"$states"; then
      for node in $(awk '$2 ~ /^(down|drain|drng|fail)/ {print $1}' <<<"$states"); do
        scontrol update NodeName="$node" State=RESUME 2>/dev/null || true
      done
      resumed=1
    fi
    for pidfile in "$RUN/slurmctld.pid" "$RUN/slurmd-node1.pid" "$RUN/slurmd-node2.pid"; do
      if [ "$SECONDS" -ge $((deadline - START_TIMEOUT + 3)) ] && ! alive "$pidfile"; then
        local name; name=$(basename "$pidfile" .pid)
        say "$name is not running; the end of $LOG/$name.log:"
        tail -n 5 "$LOG/$name.log" >&2 || true
        die "$name did not start (is port $PORT, $((PORT + 1)) or $((PORT + 2)) taken? BENCH_SLURM_PORT picks others)"
      fi
    done
    if [ "$SECONDS" -ge "$deadline" ]; then
      say "the nodes did not come up in $START_TIMEOUT s; sinfo says:"
      SLURM_CONF=$CONF sinfo -N >&2 || true
      say "see the logs: $LOG/slurmctld.log $LOG/slurmd-node1.log $LOG/slurmd-node2.log $LOG/munged.log"
      exit 1
    fi
    sleep 0.5
  done
}

# Processes started with this cluster's mark in their environment (daemons, slurmstepd).
marked() {
  local pid
  for pid in $(ls /proc | grep -E '^[0-9]+$'); do
    [ "$pid" = "$$" ] && continue
    tr '\0' '\n' 2>/dev/null < "/proc/$pid/environ" | grep -qxF "$MARK" && echo "$pid"
  done
  return 0
}

descendants() {  # the pids below $1, deepest last
  local kids
  kids=$(ps -e -o pid=,ppid= | awk -v p="$1" '$2 == p {print $1}')
  for kid in $kids; do echo "$kid"; descendants "$kid"; done
}

stop_pids() {  # TERM them all, wait up to 10 s, then KILL what is left
  [ $# -gt 0 ] || return 0
  kill "$@" 2>/dev/null || true
  local pid left
  for _ in $(seq 100); do
    left=""
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left=1; done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  kill -9 "$@" 2>/dev/null || true
}

stop_daemons() {  # slurmctld and the slurmd (and munged with "munge"): together, ~2 s
  local pidfile pids=()
  # Also the pid files of the first version of this script (kept in $DIR itself).
  local files=("$RUN"/slurmd-*.pid "$DIR"/slurmd-*.pid "$RUN/slurmctld.pid" "$DIR/slurmctld.pid")
  [ "${1:-}" = munge ] && files+=("$RUN/munged.pid")
  for pidfile in "${files[@]}"; do
    [ -e "$pidfile" ] || continue
    if alive "$pidfile"; then pids+=("$(cat "$pidfile")"); fi
    rm -f "$pidfile"
  done
  stop_pids "${pids[@]}"
}

stepds() {  # this cluster's slurmstepd processes
  local pid
  for pid in $(marked); do
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmstepd ] && echo "$pid"
  done
  return 0
}

stop() {
  if [ -f "$CONF" ] && alive "$RUN/slurmctld.pid"; then
    # Cancel every job, and let the nodes end their steps (KillWait=2) before slurmd goes.
    local jobs
    jobs=$(SLURM_CONF=$CONF squeue -h -o '%i' 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086  # one job id a word
      SLURM_CONF=$CONF scancel $jobs 2>/dev/null || true
      for _ in $(seq 50); do [ -z "$(stepds)" ] && break; sleep 0.2; done
    fi
  fi
  stop_daemons munge
  # Whatever of this cluster is still alive (a step daemon and its tasks): kill the tree.
  local pid
  for pid in $(marked); do
    for p in "$pid" $(descendants "$pid"); do kill -9 "$p" 2>/dev/null || true; done
  done
  say "stopped"
}

status() {
  local pidfile
  for pidfile in "$RUN/munged.pid" "$RUN/slurmctld.pid" "$RUN"/slurmd-node1.pid "$RUN"/slurmd-node2.pid; do
    if alive "$pidfile"; then echo "$(basename "$pidfile" .pid): running (pid $(cat "$pidfile"))"
    else echo "$(basename "$pidfile" .pid): not running"; fi
  done
  # sinfo retries for ~10 s when no controller answers: ask it only when slurmctld runs.
  alive "$RUN/slurmctld.pid" || { echo "the cluster is down ($DIR)"; return 1; }
  SLURM_CONF=$CONF sinfo -N -p bench
}

case "${1:-}" in
  install) install_missing ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) printf 'export SLURM_CONF=%q\n' "$CONF" ;;
  *) echo "usage: $0 start|stop|status|env|install" >&2; exit 2 ;;
esac
