#!/usr/bin/env bash
# Simulated hosts on one machine, for multi-host tests of mpirun and Slurm. Each host is a
# network namespace named after the host, with loopback up and one veth ("eth0") plugged into
# a bridge in the root namespace; host i (1..N) has address 10.R.0.(10+i), the bridge 10.R.0.1.
# Commands run on a host in its network namespace and in a fresh UTS namespace whose hostname
# is the host's name; the file system is shared. No traffic leaves the bridge. Needs root.
#
#   scripts/sim_hosts.sh create DIR N     make N hosts; writes DIR/hosts ("name address" lines),
#                                         DIR/hostfile (mpirun), DIR/bridge_address, DIR/subnet;
#                                         prints the bridge address
#   scripts/sim_hosts.sh agent [-x...] HOST CMD...   run CMD on HOST as ssh would (mpirun's
#                                         plm_rsh_agent); HOST is a host name or its address
#   scripts/sim_hosts.sh exec HOST PROG [ARGS...]    run PROG on HOST without a shell
#   scripts/sim_hosts.sh destroy DIR      remove the hosts, bridge and veths made for DIR
#
# Names derive from a hash of DIR's absolute path (fb<id>n<i>, bridge fb<id>br), so hosts
# made for different DIRs do not collide; the subnet is the first free 10.R.0.0/24 from a
# hash-chosen R. Another script may `source` this file to reuse the sim_hosts_* functions;
# sourcing runs nothing.
set -euo pipefail

readonly SIM_HOSTS_LOCK=/run/lock/fullband-sim-hosts.lock

sim_hosts_usage() {
  sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

sim_hosts_die() {
  echo "sim_hosts: $*" >&2
  exit 1
}

# Prints the 6-hex-digit id of directory $1 (which must exist).
sim_hosts_id() {
  local abs
  abs=$(cd "$1" && pwd -P)
  printf '%s' "$abs" | sha1sum | cut -c1-6
}

# Prints a third octet R such that no route of the root namespace but the default one covers
# 10.R.0.0/24, starting from one chosen by id $1. Call with the lock held.
sim_hosts_free_octet() {
  local start r i routes
  start=$((16#$1 % 235))
  for ((i = 0; i < 235; i++)); do
    r=$(((start + i) % 235 + 20))
    routes=$(ip -4 route show match "10.$r.0.0/24")
    if ! grep -qv -e '^default' -e '^$' <<<"$routes"; then
      echo "$r"
      return 0
    fi
  done
  sim_hosts_die "no free 10.R.0.0/24 subnet"
}

# Adds host $1 (index $2) with address $3 on bridge $4; veth fb<id>v<i> in the root namespace.
sim_hosts_add_host() {
  local name=$1 index=$2 addr=$3 bridge=$4 veth
  veth=${bridge%br}v$index
  ip netns add "$name"
  ip link add "$veth" type veth peer name eth0 netns "$name"
  ip link set "$veth" master "$bridge" up
  ip -n "$name" link set lo up
  ip -n "$name" addr add "$addr/24" dev eth0
  ip -n "$name" link set eth0 up
}

# create DIR N
sim_hosts_create() {
  local dir=$1 n=$2 id r bridge i name addr lock_fd
  [[ $n =~ ^[1-9][0-9]?$ ]] || sim_hosts_die "N must be 1..99, got '$n'"
  mkdir -p "$dir"
  sim_hosts_destroy "$dir"
  id=$(sim_hosts_id "$dir")
  bridge=fb${id}br
  # Two creates at once must not pick the same subnet.
  mkdir -p "${SIM_HOSTS_LOCK%/*}"
  exec {lock_fd}>"$SIM_HOSTS_LOCK"
  flock "$lock_fd"
  r=$(sim_hosts_free_octet "$id")
  ip link add "$bridge" type bridge
  ip addr add "10.$r.0.1/24" dev "$bridge"
  ip link set "$bridge" up
  exec {lock_fd}>&-
  : >"$dir/hosts"
  : >"$dir/hostfile"
  for ((i = 1; i <= n; i++)); do
    name=fb${id}n$i
    addr=10.$r.0.$((10 + i))
    sim_hosts_add_host "$name" "$i" "$addr" "$bridge"
    echo "$name $addr" >>"$dir/hosts"
    echo "$addr slots=1" >>"$dir/hostfile"
  done
  echo "10.$r.0.1" >"$dir/bridge_address"
  echo "10.$r.0.0/24" >"$dir/subnet"
  echo "$bridge" >"$dir/bridge"
  cat "$dir/bridge_address"
}

# destroy DIR: removes every namespace, veth and the bridge named after DIR's id, whether or
# not DIR/hosts survived. Safe to repeat.
sim_hosts_destroy() {
  local dir=$1 id ns link
  [[ -d $dir ]] || return 0
  id=$(sim_hosts_id "$dir")
  for ns in $(ip netns list | awk '{print $1}'); do
    if [[ $ns =~ ^fb${id}n[0-9]+$ ]]; then
      # Processes left in the namespace keep its veth alive; end them first.
      sim_hosts_kill_in_ns "$ns"
      ip netns delete "$ns"
    fi
  done
  for link in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
    if [[ $link =~ ^fb${id}v[0-9]+$ ]]; then ip link delete "$link" 2>/dev/null || true; fi
  done
  if ip link show "fb${id}br" >/dev/null 2>&1; then ip link delete "fb${id}br"; fi
  rm -f "$dir/hosts" "$dir/hostfile" "$dir/bridge_address" "$dir/subnet" "$dir/bridge"
}

# Sends TERM, then after up to 5 s KILL, to every process in network namespace $1.
sim_hosts_kill_in_ns() {
  local ns=$1 pids i
  for ((i = 0; i < 50; i++)); do
    mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
    ((${#pids[@]} > 0)) || return 0
    if ((i == 0)); then kill -TERM "${pids[@]}" 2>/dev/null || true; fi
    if ((i == 49)); then kill -KILL "${pids[@]}" 2>/dev/null || true; fi
    sleep 0.1
  done
}

# Prints the namespace (= host name) for $1, a host name or the address of one.
sim_hosts_resolve() {
  local host=$1 ns
  if [[ -e /run/netns/$host ]]; then
    echo "$host"
    return 0
  fi
  for ns in $(ip netns list | awk '{print $1}'); do
    [[ $ns =~ ^fb[0-9a-f]{6}n[0-9]+$ ]] || continue
    if ip -n "$ns" -o -4 addr show dev eth0 2>/dev/null | grep -q " inet $host/"; then
      echo "$ns"
      return 0
    fi
  done
  sim_hosts_die "no simulated host '$host'"
}

# exec HOST PROG [ARGS...]: replaces this shell with PROG on HOST.
sim_hosts_exec() {
  local ns
  ns=$(sim_hosts_resolve "$1")
  shift
  # nsenter, not `ip netns exec`: that also remounts /sys, which hides /sys/fs/cgroup (slurmd
  # then fails to start).
  # shellcheck disable=SC2016  # expanded by the inner shell
  exec nsenter --net="/run/netns/$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
}

# agent [ssh options] HOST WORDS...: like ssh, joins WORDS with spaces and runs them with sh -c.
# Open MPI's rsh launcher calls its agent as `AGENT HOST orted-command-words...`; options
# before HOST (e.g. ssh's -x) are accepted and ignored.
sim_hosts_agent() {
  while [[ $# -gt 0 && $1 == -* ]]; do shift; done
  [[ $# -ge 2 ]] || sim_hosts_die "agent: usage: agent [options] HOST CMD..."
  local host=$1
  shift
  sim_hosts_exec "$host" sh -c "$*"
}

sim_hosts_main() {
  [[ $# -ge 1 ]] || sim_hosts_usage 2
  local cmd=$1
  shift
  case $cmd in
    create) [[ $# -eq 2 ]] || sim_hosts_usage 2; sim_hosts_create "$1" "$2" ;;
    destroy) [[ $# -eq 1 ]] || sim_hosts_usage 2; sim_hosts_destroy "$1" ;;
    agent) sim_hosts_agent "$@" ;;
    exec) [[ $# -ge 2 ]] || sim_hosts_usage 2; sim_hosts_exec "$@" ;;
    -h | --help) sim_hosts_usage 0 ;;
    *) sim_hosts_usage 2 ;;
  esac
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  sim_hosts_main "$@"
fi
