#!/usr/bin/env bash
# A real Slurm cluster with two compute nodes on this one machine, for tests and for trying
# `make bench-slurm` without a cluster: Debian's slurmctld, slurmd and munge.
#
#   scripts/slurm-cluster.sh start    install what is missing, start munged, slurmctld and
#                                     two slurmd (node1, node2); wait until both are idle
#   scripts/slurm-cluster.sh stop     stop the daemons it started
#   scripts/slurm-cluster.sh status   sinfo
#   scripts/slurm-cluster.sh env      the export line a caller needs (SLURM_CONF)
#
# The two nodes are two slurmd on loopback, each with its own port, spool and log
# (`slurmd -N node1`, `-N node2`: Debian's build accepts several NodeName lines with one
# NodeAddr). Their NodeAddr, and so a job's MASTER_ADDR, is 127.0.0.1. Everything lives
# under BENCH_SLURM_DIR (default /var/lib/bench-slurm), with its own slurm.conf: a site's
# /etc/slurm is never read or written. There is no accounting database: a finished job's
# state, reason and exit code come from `scontrol show job` (kept MinJobAge seconds).
set -euo pipefail
DIR=${BENCH_SLURM_DIR:-/var/lib/bench-slurm}
CONF=$DIR/slurm.conf
NODES=(node1 node2)
say() { echo "slurm-cluster: $*" >&2; }

install_missing() {
  local missing=()
  for tool in slurmctld slurmd sbatch munged; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  [ ${#missing[@]} -eq 0 ] && return
  say "installing slurmctld slurmd slurm-client munge (missing: ${missing[*]})"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmctld slurmd slurm-client munge >/dev/null
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  if [ ! -s /etc/munge/munge.key ]; then
    say "creating a munge key"
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  fi
  su -s /bin/sh munge -c /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return; sleep 0.1; done
  say "munged does not answer: see /var/log/munge/munged.log"; exit 1
}

write_conf() {
  local cpus memory
  cpus=$(nproc); memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4 ))
  mkdir -p "$DIR/state" "$DIR/log"
  for node in "${NODES[@]}"; do mkdir -p "$DIR/spool-$node"; done
  cat > "$CONF" <<EOF
# Written by scripts/slurm-cluster.sh: two compute nodes on this machine, on loopback.
ClusterName=bench
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=6817
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool-%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# A finished job stays visible to scontrol this long: the launcher reads its end state.
MinJobAge=600
KillWait=5
InactiveLimit=0
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17001 CPUs=$cpus RealMemory=$memory State=UNKNOWN
NodeName=node2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17002 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=bench Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
  install_missing
  start_munge
  write_conf
  export SLURM_CONF=$CONF
  running "$DIR/slurmctld.pid" || slurmctld -f "$CONF"
  for node in "${NODES[@]}"; do
    running "$DIR/slurmd-$node.pid" || slurmd -f "$CONF" -N "$node"
  done
  for _ in $(seq 120); do
    if [ "$(sinfo -h -o '%t' -N 2>/dev/null | grep -c '^idle')" = "${#NODES[@]}" ]; then
      say "up: ${NODES[*]} idle in partition bench (SLURM_CONF=$CONF)"; return
    fi
    sleep 0.5
  done
  say "the nodes did not become idle in 60 s; sinfo says:"; sinfo -N >&2 || true
  say "logs: $DIR/log/slurmctld.log, $DIR/log/slurmd-node1.log, $DIR/log/slurmd-node2.log"
  exit 1
}

stop() {
  for pidfile in "$DIR"/slurmd-*.pid "$DIR/slurmctld.pid"; do
    [ -e "$pidfile" ] || continue
    if running "$pidfile"; then kill "$(cat "$pidfile")"; fi
    rm -f "$pidfile"
  done
  say "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) SLURM_CONF=$CONF sinfo -N ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
