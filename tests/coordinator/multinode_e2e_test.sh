#!/usr/bin/env bash
# A DP2 job with one rank on each of two simulated hosts (scripts/sim_hosts.sh: a network and
# hostname namespace each, joined by a bridge; docs/SLURM.md), under both launchers, held to
# the same job on one host: the same ledger, and final parameters and moments bitwise equal
# (so every loss on the way was equal too).
#   1. local: mpirun with a hostfile, its remote-start agent entering each host; MPI over TCP
#      only (btl tcp,self), the coordinator reached at the bridge address it advertises;
#   2. slurm: a private cluster of two slurmd nodes, one per simulated host
#      (scripts/slurm_cluster.sh --netns --nodes 2), ranks started by srun --mpi=pmix.
# Each run also checks that its two ranks ran in two different network namespaces, neither of
# them this test's own. Everything this test creates is removed when it ends.
# usage: multinode_e2e_test.sh FULLBAND
set -euo pipefail
[[ $(id -u) == 0 ]] || { echo "SKIP: needs root (Slurm's daemons, network namespaces)"; exit 77; }
fullband=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
source "$root/tests/e2e_lib.sh"
scratch_dir
steps=320 d_model=128 seq_len=64  # still running after seconds of status polls at 0.04 s a step
source "$root/tests/worker/chaos_lib.sh"
hosts=$dir/hosts cluster=$dir/slurm
trap '"$root/scripts/slurm_cluster.sh" stop "$cluster" > /dev/null 2>&1 || true
      "$root/scripts/sim_hosts.sh" destroy "$hosts" > /dev/null 2>&1 || true; cleanup' EXIT

# Restarts the coordinator on every address at port $port, advertising $1:$port to workers.
coordinator_for() {
  [[ -z $coordinator_pid ]] || stop_coordinator
  listen=0.0.0.0:$port write_coordinator_config "$dir/coordinator.yaml" "advertise: $1:$port
heartbeat_timeout_seconds: 30
slurm_poll_seconds: 1
${2:-}"
  start_coordinator "$fullband" "$dir/coordinator.yaml"
}
# While job $1 runs: its ranks' network namespaces are two, and neither is this shell's.
check_two_hosts() {
  wait_until "$1" "int(j['ledger'].get('steps', 0)) >= 2" "$1: no steps"
  local pids namespaces
  pids=$(worker_pids "$1")
  namespaces=$(for p in $pids; do readlink "/proc/$p/ns/net"; done | sort -u)
  [[ $(wc -w <<< "$pids") == 2 && $(wc -l <<< "$namespaces") == 2 ]] ||
    fail "$1: ranks $pids in namespaces $namespaces"
  ! grep -qx "$(readlink /proc/self/ns/net)" <<< "$namespaces" || fail "$1: a rank on this host"
  echo "$1: ranks $(tr '\n' ' ' <<< "$pids")in two simulated hosts"
}

port=$(free_port)
coordinator_for 127.0.0.1
run_reference  # one host

# 1. The local launcher, one rank per simulated host.
bridge=$("$root/scripts/sim_hosts.sh" create "$hosts" 2)
subnet=$(cat "$hosts/subnet")
coordinator_for "$bridge" "mpirun_args: [--hostfile, $hosts/hostfile,
  --mca, plm_rsh_agent, \"$root/scripts/sim_hosts.sh agent\", --mca, btl, \"tcp,self\",
  --mca, btl_tcp_if_include, $subnet, --mca, oob_tcp_if_include, $subnet]"
job hosts-local > "$dir/a.yaml"
a=$("$fullband" submit "$dir/a.yaml")
check_two_hosts "$a"
check hosts-local "$a" 0 0

# 2. Slurm, one slurmd per simulated host.
"$root/scripts/slurm_cluster.sh" start "$cluster" --nodes 2 --netns > /dev/null
source "$cluster/env"
coordinator_for "$(cat "$cluster/bridge_address")"
job hosts-slurm "" ", kind: slurm, slurm: {nodes: 2, tasks_per_node: 1}" > "$dir/b.yaml"
b=$("$fullband" submit "$dir/b.yaml")
check_two_hosts "$b"
check hosts-slurm "$b" 0 0

stop_coordinator
echo "multinode_e2e_test: ok"
