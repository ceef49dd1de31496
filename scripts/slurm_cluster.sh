#!/usr/bin/env bash
# A private, throwaway Slurm cluster for tests: its own munged, slurmctld and slurmd(s), all
# state, logs, sockets and pidfiles under DIR, on TCP ports free at start, so that it never
# touches a system munged or Slurm and two clusters can run side by side. Needs root.
#
#   scripts/slurm_cluster.sh start DIR [--nodes N] [--netns]
#   scripts/slurm_cluster.sh stop DIR
#
# start stops whatever an earlier start left in DIR, then writes DIR/slurm.conf and DIR/env
# (`source DIR/env` sets SLURM_CONF), starts the daemons and waits until every node is idle;
# if they do not come up it prints the logs' tails and fails. Without --netns there is one node
# on 127.0.0.1. With --netns each of the N nodes is a simulated host made by
# scripts/sim_hosts.sh (its own network and UTS namespaces, hostname = node name, address
# 10.R.0.(10+i)); slurmctld listens on the bridge address 10.R.0.1 in the root namespace.
# stop cancels the cluster's jobs, ends its daemons by their pidfiles (TERM, then KILL after
# 10 s) and removes the namespaces. Both are safe to repeat.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/sim_hosts.sh
source "$here/sim_hosts.sh"
# shellcheck source=tests/e2e_lib.sh
source "$here/../tests/e2e_lib.sh"  # free_port, wait_for

readonly START_TIMEOUT_S=30
readonly STOP_TIMEOUT_S=10

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

die() {
  echo "slurm_cluster: $*" >&2
  exit 1
}

# True if process $1 is alive (not a zombie) and its command is $2.
proc_alive() {
  local stat
  [[ $(cat "/proc/$1/comm" 2>/dev/null) == "$2" ]] || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [[ ${stat##*) } != Z* ]]
}
proc_gone() { ! proc_alive "$1" "$2"; }

# Prints the pid in pidfile $1 if it names a live $2. Daemons remove their pidfile as they
# exit, so the file may vanish at any moment.
live_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && proc_alive "$pid" "$2" && echo "$pid"
}

# Ends the process in pidfile $1 if it is a $2: TERM, then KILL after STOP_TIMEOUT_S.
stop_pidfile() {
  local pidfile=$1 comm=$2 pid
  if pid=$(live_pid "$pidfile" "$comm"); then
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_for "$STOP_TIMEOUT_S" proc_gone "$pid" "$comm"; then
      echo "slurm_cluster: $comm ($pid) ignored TERM for ${STOP_TIMEOUT_S}s; killing" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
}

# Cancels every job of the cluster in $1 and waits (bounded) until none is left.
cancel_jobs() {
  local dir=$1 ids
  live_pid "$dir/run/slurmctld.pid" slurmctld >/dev/null || return 0
  export SLURM_CONF=$dir/slurm.conf
  ids=$(timeout 5 squeue -h -o %i 2>/dev/null || true)
  [[ -n $ids ]] || return 0
  # shellcheck disable=SC2086  # one job id per word
  timeout 5 scancel $ids 2>/dev/null || true
  wait_for "$STOP_TIMEOUT_S" no_jobs_left ||
    echo "slurm_cluster: jobs still running after ${STOP_TIMEOUT_S}s; stopping anyway" >&2
}
no_jobs_left() { [[ -z $(timeout 5 squeue -h -t PD,R,S,CG -o %i 2>/dev/null) ]]; }

cluster_stop() {
  local dir=$1 pidfile
  [[ -d $dir ]] || return 0
  cancel_jobs "$dir"
  for pidfile in "$dir"/run/slurmd.*.pid; do
    [[ -e $pidfile ]] && stop_pidfile "$pidfile" slurmd
  done
  stop_pidfile "$dir/run/slurmctld.pid" slurmctld
  stop_pidfile "$dir/munge/munged.pid" munged
  sim_hosts_destroy "$dir"
}

# Makes DIR/munge with a fresh key and starts munged on DIR/munge/munge.sock.
start_munged() {
  local m=$1/munge
  rm -rf "$m"
  mkdir -p "$m"
  chmod 0711 "$m"
  dd if=/dev/urandom of="$m/munge.key" bs=1 count=1024 status=none
  chmod 0400 "$m/munge.key"
  munged --socket="$m/munge.sock" --key-file="$m/munge.key" --pid-file="$m/munged.pid" \
    --log-file="$m/munged.log" --seed-file="$m/munged.seed" --force
}

# write_conf DIR CTL_ADDR: writes DIR/slurm.conf for the nodes in DIR/nodes, and DIR/env.
write_conf() {
  local dir=$1 ctl_addr=$2 ports names node_lines
  mapfile -t ports < <(free_port 2)
  names=$(awk '{print $1}' "$dir/nodes" | paste -sd,)
  node_lines=$(awk -v cpus="$(nproc)" '{printf "NodeName=%s NodeAddr=%s NodeHostname=%s CPUs=%d State=UNKNOWN\n", $1, $2, $3, cpus}' "$dir/nodes")
  cat >"$dir/slurm.conf" <<EOF
# Written by scripts/slurm_cluster.sh; rewritten at every start.
ClusterName=fb$(sim_hosts_id "$dir")
SlurmctldHost=$(hostname -s)($ctl_addr)
SlurmctldPort=${ports[0]}
SlurmdPort=${ports[1]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
# Per node: the mpi/pmix plugin makes its client directories under TmpFS, and the simulated
# hosts share one file system.
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.log
MpiDefault=none
# Batch jobs otherwise wait for the next scheduling pass, up to 3 s after submission.
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
KillWait=5
MinJobAge=300
InactiveLimit=0
MailProg=/bin/true
$node_lines
PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  echo "export SLURM_CONF=$dir/slurm.conf" >"$dir/env"
}

# Writes DIR/nodes, one "name address hostname" line per node: one node on 127.0.0.1, or with
# netns=1 the N simulated hosts, made now.
write_nodes() {
  local dir=$1 nodes=$2 netns=$3
  if ((netns)); then
    sim_hosts_create "$dir" "$nodes" >/dev/null
    awk '{print $1, $2, $1}' "$dir/hosts" >"$dir/nodes"
  else
    echo "fb$(sim_hosts_id "$dir")n1 127.0.0.1 localhost" >"$dir/nodes"
  fi
}

# Waits until every node of the cluster is idle; on timeout prints the logs and fails.
wait_idle() {
  local dir=$1 n=$2 states=
  wait_for "$START_TIMEOUT_S" nodes_idle "$n" && return 0
  echo "slurm_cluster: nodes not idle after ${START_TIMEOUT_S}s: $(paste -sd' ' <<<"$states")" >&2
  tail -n 20 "$dir"/log/*.log "$dir/munge/munged.log" >&2 || true
  return 1
}
# True if $1 nodes are idle; leaves sinfo's node states in the caller's $states.
nodes_idle() {
  states=$(timeout 5 sinfo -h -N -o %t 2>/dev/null || true)
  [[ $(grep -c '^idle$' <<<"$states") -eq $1 ]]
}

# Waits (bounded) for slurmctld's first scheduling pass. Until that pass has read
# SchedulerParameters, slurmctld uses the default batch_sched_delay of 3 s, so a job submitted
# in the first 3 s after start waits for it; once it has run, a batch job starts at once.
wait_first_schedule() {
  wait_for 10 scheduled_once ||
    echo "slurm_cluster: no scheduling pass yet; the first job may wait up to 3 s" >&2
}
scheduled_once() {
  local cycles
  cycles=$(timeout 5 sdiag 2>/dev/null | awk -F: '/Total cycles/ {print $2 + 0; exit}' || true)
  [[ ${cycles:-0} -ge 1 ]]
}

# Starts one slurmd per line of DIR/nodes, in its simulated host if netns is 1.
start_slurmds() {
  local dir=$1 netns=$2 name
  while read -r name _; do
    mkdir -p "$dir/spool/$name" "$dir/tmp/$name"
    if ((netns)); then
      (sim_hosts_exec "$name" slurmd -N "$name" </dev/null)
    else
      slurmd -N "$name" </dev/null
    fi
  done <"$dir/nodes"
}

cluster_start() {
  local dir=$1 nodes=$2 netns=$3 ctl_addr=127.0.0.1
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd -P)
  cluster_stop "$dir"
  rm -rf "$dir/state" "$dir/spool" "$dir/tmp" "$dir/log" "$dir/run" "$dir/jobcomp.log"
  mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/run"
  start_munged "$dir"
  write_nodes "$dir" "$nodes" "$netns"
  if ((netns)); then ctl_addr=$(<"$dir/bridge_address"); fi
  write_conf "$dir" "$ctl_addr"
  export SLURM_CONF=$dir/slurm.conf
  slurmctld </dev/null
  start_slurmds "$dir" "$netns"
  wait_idle "$dir" "$nodes"
  wait_first_schedule
}

main() {
  [[ ${1:-} == -h || ${1:-} == --help ]] && usage 0
  [[ $# -ge 2 ]] || usage 2
  local cmd=$1 dir=$2 nodes=1 netns=0
  shift 2
  while [[ $# -gt 0 ]]; do
    case $1 in
      --nodes) [[ $# -ge 2 ]] || usage 2; nodes=$2; shift 2 ;;
      --netns) netns=1; shift ;;
      *) usage 2 ;;
    esac
  done
  [[ $nodes =~ ^[1-9][0-9]?$ ]] || die "--nodes must be 1..99, got '$nodes'"
  ((nodes == 1 || netns)) || die "--nodes $nodes needs --netns (one slurmd per host)"
  [[ $(id -u) -eq 0 ]] || die "must run as root"
  # slurm.conf cannot quote paths; AuthInfo splits on commas.
  [[ $dir =~ ^[^[:space:],=]+$ ]] || die "DIR must not contain spaces, commas or '='"
  # Unix sockets go under DIR (munged's, slurmd's per step); their paths must fit 108 bytes.
  (($(realpath -m "$dir" | wc -c) <= 61)) || die "DIR's absolute path must be 60 characters or less"
  case $cmd in
    start) cluster_start "$dir" "$nodes" "$netns" ;;
    stop) cluster_stop "$(cd "$dir" 2>/dev/null && pwd -P || echo "$dir")" ;;
    *) usage 2 ;;
  esac
}

main "$@"
