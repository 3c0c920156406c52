# A one-node Slurm cluster of the test's own, from Debian's packages (slurm-wlm, munge): sourced
# by test_slurm.sh, not run. Everything lives under one folder: a munge key and socket, the
# config (its own cluster name and ports), state, spool, pid and log files. The daemons run in
# the foreground as children of the test, so slurm_cluster_stop (the test's EXIT trap) ends them
# whatever happened; nothing outside the folder is touched.
#
#   slurm_cluster_start DIR CPUS     start munged, slurmctld and slurmd; export SLURM_CONF
#   slurm_cluster_stop [PATTERN]     cancel every job, stop the daemons, wait for them; then end
#                                    any process left whose command line holds PATTERN
#   job_field ID NAME                a field of `scontrol show job ID` (JobState, Restarts, ...)
#   wait_job_state ID SECS STATE...  until the job is in one of the states; fails after SECS
#
# Needs root (slurmd starts job steps for their user) and fails, naming what is missing, where the
# packages are not installed.

slurm_pids=()
slurm_dir=

# A TCP port nothing listens on, from the ephemeral range's lower neighbours.
free_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  fail "no free TCP port found for Slurm"
}

slurm_cluster_start() {
  local dir=$1 cpus=$2 host
  [[ $(id -u) == 0 ]] || fail "the Slurm test starts slurmd, which needs root: run it as root (as CI does)"
  local missing=()
  for c in munged slurmctld slurmd sbatch srun scontrol scancel sinfo; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [[ ${#missing[@]} == 0 ]] || fail "not installed: ${missing[*]} (apt-get install -y --no-install-recommends slurm-wlm munge; launch/setup.sh test does it)"
  host=$(hostname -s)
  slurm_dir=$dir
  mkdir -p "$dir"/{munge,state,spool,log}
  chmod 711 "$dir" "$dir/munge"
  # munge: a key of our own and a socket of our own (AuthInfo below points Slurm at it).
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
  cat >"$dir/slurm.conf" <<EOF
ClusterName=dtraintest$$
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
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
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf
  # Give munged its socket before the daemons ask for credentials.
  for _ in $(seq 1 50); do [[ -S $dir/munge/socket ]] && break; sleep 0.1; done
  [[ -S $dir/munge/socket ]] || { cat "$dir/log/munged.log" >&2; fail "munged did not start"; }
  slurmctld -D -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  slurmd -D -f "$SLURM_CONF" >"$dir/log/slurmd.out" 2>&1 &
  slurm_pids+=($!)
  local state=""
  for _ in $(seq 1 60); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null | head -1)
    [[ $state == idle ]] && break
    # A node that registered as down or unknown comes up when told to resume.
    [[ -z $state || $state == *'*' ]] || scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
    sleep 0.5
  done
  if [[ $state != idle ]]; then
    tail -n 20 "$dir"/log/*.log "$dir"/log/*.out >&2 || true
    fail "the Slurm node did not come up (state '$state' after 30 s)"
  fi
  echo "slurm: one-node cluster up ($host, $cpus CPUs, ports $ctld_port/$slurmd_port, MpiDefault=pmix)"
}

slurm_cluster_stop() {
  [[ -n $slurm_dir ]] || return 0
  local ids
  ids=$(squeue -h -o %i 2>/dev/null || true)
  [[ -z $ids ]] || scancel $ids 2>/dev/null || true
  # Job steps end with their tasks (KillWait); give them a moment, then stop the daemons.
  for _ in $(seq 1 20); do [[ -z $(squeue -h -t running 2>/dev/null) ]] && break; sleep 0.5; done
  local p
  for p in "${slurm_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 1 40); do
    local alive=0
    for p in "${slurm_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.25
  done
  for p in "${slurm_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  # Tasks of steps that outlived slurmd (a failed test): named by the caller's pattern.
  [[ -z ${1:-} ]] || pkill -KILL -f -- "$1" 2>/dev/null || true
  slurm_pids=()
  slurm_dir=
}

job_field() {
  scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}

wait_job_state() {
  local id=$1 secs=$2 state
  shift 2
  for _ in $(seq 1 $((secs * 2))); do
    state=$(job_field "$id" JobState)
    for s in "$@"; do [[ $state == "$s" ]] && return 0; done
    sleep 0.5
  done
  fail "job $id: state '$state' after ${secs} s, expected one of: $*"
}
