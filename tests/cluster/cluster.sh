# Several "hosts" on this one machine, for the cluster tier: sourced by the tier's test scripts,
# not run. Each node is a Linux network namespace (its own eth0, address and loopback, joined to
# the others by a veth pair to one bridge) and a UTS namespace (its own hostname), sharing the
# file system as cluster nodes share a network file system. `ip netns exec` gives each command on
# a node the node's /etc/hosts (bind-mounted from /etc/netns/<ns>/hosts), which names every node.
#
#   cluster_up N          build nodes dtrain-n1..dtrain-nN (10.213.77.11, .12, ...; the host side
#                         of the bridge is 10.213.77.1, dtrain-head); removes the leftovers of an
#                         earlier run that was killed first
#   cluster_down          end every process in the nodes, remove the namespaces, veths, bridge and
#                         files (the tests' EXIT trap: also on failure or timeout)
#   on_node HOST CMD...   run CMD on a node (HOST: its name or address), as a login there would
#                         (CLUSTER_HOST_MOUNTS=1: with this machine's mounts, e.g. for slurmd)
#   node_pids HOST        the processes in a node's network namespace
#   node_link HOST up|down  the node's link to the bridge (its veth, host side)
#   node_shape HOST RATE|off  shape the node's link to RATE (tc's units: 1gbit, 100mbit) both ways
#                         with a token bucket (tbf): on the veth's host side (what the bridge sends
#                         to the node) and on the node's eth0 (what it sends); off removes both
#   node_qdiscs HOST      the tbf queueing disciplines on the node's link (empty when unshaped),
#                         with their counters (tc -s)
#   cluster_mpi_args      mpirun options for these nodes (DTRAIN_MPIRUN_ARGS): the launch agent
#                         (rsh-agent.sh) and Open MPI's TCP kept on the bridge's subnet
#
# Open MPI reaches a node through rsh-agent.sh (plm_rsh_agent): mpirun calls it as ssh,
# `agent HOST orted ...`, and it runs the command on that node with a login's bare environment.
#
# Everything carries the prefix "dtc": namespaces dtc-n1.., bridge dtc-br, veths dtc-n1-h (the
# node's eth0 is its peer), files /run/dtrain-cluster/ and /etc/netns/dtc-n*. One cluster at a
# time on a machine: cluster_up takes a lock (/run/dtrain-cluster.lock, flock), held until the
# test's process ends, so what it finds of the prefix is a dead run's and is removed. ctest runs
# the tier's tests one at a time (RESOURCE_LOCK).
#
# Needs root, ip (iproute2), nsenter/unshare (util-linux) and flock. Without them it fails naming
# what is missing; outside CI (no $CI), a test may exit 77 instead (ctest: skipped), with the
# reason.

cluster_prefix=dtc
cluster_dir=/run/dtrain-cluster
cluster_net=10.213.77
cluster_subnet=$cluster_net.0/24
cluster_bridge=${cluster_prefix}-br
cluster_nodes=()   # host names, in order
cluster_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# cluster_missing: why this machine cannot build nodes (empty: it can).
cluster_missing() {
  local why=() c
  [[ $(id -u) == 0 ]] || why+=("root (network namespaces, veths and a bridge need CAP_NET_ADMIN and CAP_SYS_ADMIN)")
  for c in ip nsenter unshare flock; do command -v "$c" >/dev/null || why+=("$c"); done
  if command -v ip >/dev/null && [[ $(id -u) == 0 ]]; then
    ip netns add "${cluster_prefix}-probe$$" 2>/dev/null && ip netns del "${cluster_prefix}-probe$$" 2>/dev/null ||
      why+=("'ip netns add' (it failed here: a container without CAP_SYS_ADMIN?)")
  fi
  ((${#why[@]} == 0)) || echo "needs ${why[*]}"
}

# cluster_require: fail (in CI) or skip (exit 77, elsewhere) when the machine cannot build nodes.
cluster_require() {
  local why
  why=$(cluster_missing)
  [[ -z $why ]] && return 0
  if [[ -n ${CI:-} || ${DTRAIN_CLUSTER_REQUIRED:-0} == 1 ]]; then
    fail "the cluster tier $why (apt-get install iproute2 util-linux; run as root)"
  fi
  echo "SKIP: the cluster tier $why (apt-get install iproute2 util-linux; run as root)"
  exit 77
}

# cluster_clean: remove whatever of the prefix exists: processes in its namespaces, the
# namespaces, veths, bridge, mounts and files.
cluster_clean() {
  local ns p pids
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${cluster_prefix}-n[0-9]*$"); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
  done
  # Killed processes leave their namespaces once they are reaped: wait for that.
  for _ in $(seq 1 50); do
    pids=""
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${cluster_prefix}-n[0-9]*$"); do
      pids+=$(ip netns pids "$ns" 2>/dev/null || true)
    done
    [[ -z $pids ]] && break
    sleep 0.1
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${cluster_prefix}-n[0-9]*$"); do
    ip netns del "$ns" 2>/dev/null || true
  done
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${cluster_prefix}-"); do
    ip link del "$link" 2>/dev/null || true
  done
  if [[ -d $cluster_dir ]]; then
    for p in "$cluster_dir"/uts-*; do
      [[ -e $p ]] || continue
      umount "$p" 2>/dev/null || umount -l "$p" 2>/dev/null || true
    done
    rm -rf "$cluster_dir"
  fi
  rm -rf /etc/netns/"${cluster_prefix}"-n*
  rmdir /etc/netns 2>/dev/null || true
  # The kernel removes a namespace's devices after the namespace: wait until none is left.
  for _ in $(seq 1 50); do
    ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | grep -q "^${cluster_prefix}-" || return 0
    sleep 0.1
  done
  echo "cluster: links of the prefix ${cluster_prefix}- still present after cleanup:" >&2
  ip -o link show | grep "${cluster_prefix}-" >&2 || true
}

# cluster_up N
cluster_up() {
  local n=$1 i name ns addr
  exec {cluster_lock_fd}>/run/dtrain-cluster.lock
  flock -w 900 "$cluster_lock_fd" || fail "another cluster test holds /run/dtrain-cluster.lock for 15 minutes"
  if ip netns list 2>/dev/null | grep -q "^${cluster_prefix}-n" || [[ -d $cluster_dir ]] ||
     ip -o link show 2>/dev/null | grep -q ": ${cluster_prefix}-"; then
    echo "cluster: removing the leftovers of an earlier run"
    cluster_clean
  fi
  mkdir -p "$cluster_dir"
  ip link add "$cluster_bridge" type bridge
  ip addr add "$cluster_net.1/24" dev "$cluster_bridge"
  ip link set "$cluster_bridge" up
  local hosts="127.0.0.1 localhost
$cluster_net.1 dtrain-head"
  for i in $(seq 1 "$n"); do hosts+=$'\n'"$cluster_net.$((10 + i)) dtrain-n$i"; done
  : >"$cluster_dir/nodes"
  cluster_nodes=()
  for i in $(seq 1 "$n"); do
    name=dtrain-n$i ns=${cluster_prefix}-n$i addr=$cluster_net.$((10 + i))
    ip netns add "$ns"
    ip link add "$ns-h" type veth peer name "$ns-x"
    ip link set "$ns-x" netns "$ns"
    ip -n "$ns" link set "$ns-x" name eth0
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip link set "$ns-h" master "$cluster_bridge"
    ip link set "$ns-h" up
    # A UTS namespace that outlives its first process (bound to a file), with the node's name.
    touch "$cluster_dir/uts-n$i"
    unshare --uts="$cluster_dir/uts-n$i" hostname "$name"
    mkdir -p "/etc/netns/$ns"
    printf '%s\n' "$hosts" >"/etc/netns/$ns/hosts"
    echo "$name $ns $addr $cluster_dir/uts-n$i" >>"$cluster_dir/nodes"
    cluster_nodes+=("$name")
  done
  for i in $(seq 1 "$n"); do
    [[ $(on_node "dtrain-n$i" hostname) == "dtrain-n$i" ]] || fail "cluster: node dtrain-n$i does not have its hostname"
  done
  echo "cluster: $n node(s) up: $(for i in $(seq 1 "$n"); do printf '%s ' "dtrain-n$i=$cluster_net.$((10 + i))"; done)on bridge $cluster_bridge ($cluster_subnet)"
}

cluster_down() {
  [[ -n ${cluster_lock_fd:-} ]] || return 0
  cluster_clean
  exec {cluster_lock_fd}>&-
  cluster_lock_fd=
}

# node_field HOST COLUMN: a column of the node's line in the nodes file (2 namespace, 3 address,
# 4 UTS file); HOST is the name or the address.
node_field() {
  awk -v h="$1" -v c="$2" '$1 == h || $3 == h { print $c; found = 1 } END { exit !found }' "$cluster_dir/nodes"
}

on_node() {
  local host=$1 ns uts
  shift
  ns=$(node_field "$host" 2) && uts=$(node_field "$host" 4) || { echo "on_node: no node '$host'" >&2; return 255; }
  if [[ ${CLUSTER_HOST_MOUNTS:-0} == 1 ]]; then
    # The machine's own mounts (its /sys with /sys/fs/cgroup, which slurmd needs), no /etc/hosts
    # of the nodes: `ip netns exec` would mount a sysfs of the namespace over /sys.
    nsenter --net="/run/netns/$ns" --uts="$uts" -- "$@"
  else
    ip netns exec "$ns" nsenter --uts="$uts" -- "$@"
  fi
}

node_pids() { ip netns pids "$(node_field "$1" 2)"; }

node_link() { ip link set "$(node_field "$1" 2)-h" "$2"; }

node_shape() {
  local ns bits burst
  ns=$(node_field "$1" 2) || { echo "node_shape: no node '$1'" >&2; return 255; }
  tc qdisc del dev "$ns-h" root 2>/dev/null || true
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  [[ $2 == off ]] && return 0
  case $2 in
    *gbit) bits=$((${2%gbit} * 1000000000)) ;;
    *mbit) bits=$((${2%mbit} * 1000000)) ;;
    *) echo "node_shape: a rate such as 1gbit or 100mbit, not '$2'" >&2; return 255 ;;
  esac
  # The bucket holds what the rate sends in 4 ms (one tick of a 250 Hz kernel: tbf needs at
  # least rate/HZ), at least 256 KiB (a veth passes segments of up to 64 KiB, GSO); 50 ms of
  # queue before tbf drops.
  burst=$((bits / 8 / 250))
  ((burst >= 262144)) || burst=262144
  tc qdisc add dev "$ns-h" root tbf rate "$2" burst "$burst" latency 50ms
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$2" burst "$burst" latency 50ms
}

node_qdiscs() {
  local ns
  ns=$(node_field "$1" 2) || return 255
  tc -s qdisc show dev "$ns-h" | awk '/^qdisc tbf/ { p = 1 } /^qdisc/ && !/tbf/ { p = 0 } p { print "'"$ns-h"': " $0 }'
  ip netns exec "$ns" tc -s qdisc show dev eth0 | awk '/^qdisc tbf/ { p = 1 } /^qdisc/ && !/tbf/ { p = 0 } p { print "'"$1"' eth0: " $0 }'
}

cluster_mpi_args() {
  echo "--mca plm_rsh_agent $cluster_here/rsh-agent.sh --mca plm_rsh_no_tree_spawn 1" \
    "--mca oob_tcp_if_include $cluster_subnet --mca btl_tcp_if_include $cluster_subnet --mca btl tcp,vader,self"
}
