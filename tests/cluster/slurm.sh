# Slurm across the cluster tier's nodes (sourced after cluster.sh, not run): one slurmd in each
# node (NodeName=dtrain-nK, NodeAddr its address), slurmctld and munged on the host side of the
# bridge (this machine's hostname at 10.213.77.1). munged's socket is a file, so every node uses the one
# munged. Built on tests/slurm/cluster.sh (its free_port, job_field, wait_job_state and
# slurm_cluster_stop, which ends the daemons: they are this test's children).
#
#   slurm_nodes_start DIR CPUS   start munged, slurmctld, a slurmd per node; export SLURM_CONF

source "$(dirname "${BASH_SOURCE[0]}")/../slurm/cluster.sh"

slurm_nodes_start() {
  local dir=$1 cpus=$2 h
  local missing=()
  for c in munged slurmctld slurmd sbatch srun scontrol scancel sinfo; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [[ ${#missing[@]} == 0 ]] || fail "not installed: ${missing[*]} (apt-get install -y --no-install-recommends slurm-wlm munge; launch/setup.sh test does it)"
  slurm_dir=$dir
  mkdir -p "$dir"/{munge,state,spool,log}
  chmod 711 "$dir" "$dir/munge"
  head -c 1024 /dev/urandom >"$dir/munge/munge.key"
  chmod 400 "$dir/munge/munge.key"
  munged --force --foreground --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/seed" \
    --log-file="$dir/log/munged.log" 2>>"$dir/log/munged.err" &
  slurm_pids+=($!)
  local ctld_port slurmd_port
  ctld_port=$(free_port)
  slurmd_port=$(free_port)
  [[ $slurmd_port != "$ctld_port" ]] || slurmd_port=$((ctld_port + 1))
  {
    cat <<EOF
ClusterName=dtraincluster$$
SlurmctldHost=$(hostname -s)($cluster_net.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmix
JobRequeue=1
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
KillWait=30
MinJobAge=3600
EOF
    for h in "${cluster_nodes[@]}"; do
      echo "NodeName=$h NodeAddr=$(node_field "$h" 3) CPUs=$cpus RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=test Nodes=$(IFS=,; echo "${cluster_nodes[*]}") Default=YES MaxTime=INFINITE State=UP"
  } >"$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf
  for _ in $(seq 1 50); do [[ -S $dir/munge/socket ]] && break; sleep 0.1; done
  [[ -S $dir/munge/socket ]] || { cat "$dir/log/munged.log" >&2; fail "munged did not start"; }
  # Each daemon in a session of its own: a daemon's fatal error signals its process group.
  setsid slurmctld -D -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  for h in "${cluster_nodes[@]}"; do
    # A /tmp of each node's own for jobs (TmpFS): PMIx makes a folder per step there, of the same
    # name on every node.
    mkdir -p "$dir/spool/$h" "$dir/tmp/$h"
    CLUSTER_HOST_MOUNTS=1 "$cluster_here/on-node.sh" "$h" setsid slurmd -D -N "$h" -f "$SLURM_CONF" >"$dir/log/slurmd.$h.out" 2>&1 &
    slurm_pids+=($!)
  done
  local up=0 states=""
  for _ in $(seq 1 60); do
    states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    up=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l || true)
    ((up == ${#cluster_nodes[@]})) && break
    for h in $(sinfo -h -N -t down,drain -o %N 2>/dev/null || true); do
      scontrol update nodename="$h" state=resume >/dev/null 2>&1 || true
    done
    sleep 0.5
  done
  if ((up != ${#cluster_nodes[@]})); then
    tail -n 20 "$dir"/log/*.log "$dir"/log/*.out >&2 || true
    fail "the Slurm nodes did not come up (states: $states after 30 s)"
  fi
  echo "slurm: ${#cluster_nodes[@]} nodes up (${cluster_nodes[*]}, a slurmd in each; slurmctld on $(hostname -s) at $cluster_net.1, ports $ctld_port/$slurmd_port, MpiDefault=pmix)"
}
