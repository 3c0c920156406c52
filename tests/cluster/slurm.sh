# Slurm across the cluster tier's nodes (sourced after cluster.sh, not run): one slurmd in each
# node (NodeName=dtrain-nK, NodeAddr its address), slurmctld and munged on the host side of the
# bridge (this machine's hostname at 10.213.77.1). munged's socket is a file, so every node uses
# the one munged. The daemons, the config and the job helpers (job_field, wait_job_state,
# slurm_held, slurm_release, slurm_cluster_stop: the daemons are this test's children) are the
# slurm tier's, tests/slurm/cluster.sh.
#
#   slurm_nodes_start DIR CPUS   start munged, slurmctld, a slurmd per node; export SLURM_CONF
#   cluster_slurm_setup NAME N CPUS   cluster_setup NAME N, then Slurm on the nodes (CPUS each),
#                                     all of it stopped and removed on exit

source "$(dirname "${BASH_SOURCE[0]}")/../slurm/cluster.sh"

# slurm_on_node NODE CMD...: a slurmd in the node's network and UTS namespaces, entered with
# nsenter alone (CLUSTER_HOST_MOUNTS=1): `ip netns exec` would mount a sysfs of the namespace over
# /sys, without the /sys/fs/cgroup that slurmd needs.
slurm_on_node() { CLUSTER_HOST_MOUNTS=1 "$cluster_here/on-node.sh" "$@"; }

slurm_nodes_start() {
  local h specs=()
  for h in "${cluster_nodes[@]}"; do specs+=("$h=$(node_field "$h" 3)"); done
  slurm_start "$1" "$2" "$cluster_net.1" slurm_on_node "${specs[@]}"
}

cluster_slurm_setup() {
  cluster_setup "$1" "$2"
  trap 'slurm_cluster_stop; cluster_down; rm -rf "$tmp"' EXIT
  slurm_nodes_start "$tmp/slurm" "$3"
}
