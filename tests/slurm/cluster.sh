# A Slurm cluster of the test's own, from Debian's packages (slurm-wlm, munge): sourced by the
# slurm tier (test_slurm.sh: one node, this machine) and the cluster tier (tests/cluster/slurm.sh:
# a slurmd in each namespace node), not run. Everything lives under one folder: a munge key and
# socket, the config (its own cluster name and ports), state, spool, pid and log files. The
# daemons run in the foreground as children of the test, so slurm_cluster_stop (the test's EXIT
# trap) ends them whatever happened; nothing outside the folder is touched.
#
#   slurm_start DIR CPUS CTLD_ADDR RUNNER NODE=ADDR...
#                                    start munged, slurmctld (at CTLD_ADDR) and a slurmd per node
#                                    (`RUNNER NODE slurmd ...`: where the node's processes run),
#                                    wait until every node is idle; export SLURM_CONF
#   slurm_cluster_start DIR CPUS     one node: this machine at 127.0.0.1 (the slurm tier)
#   slurm_cluster_stop [PATTERN]     cancel every job, stop the daemons, wait for them; then end
#                                    any process left whose command line holds PATTERN
#   job_field ID NAME                a field of `scontrol show job ID` (JobState, Restarts, ...)
#   wait_job_state ID SECS STATE...  until the job is in one of the states; fails after SECS
#   slurm_held ID                    the job is requeued and held by Slurm (PENDING, BeginTime)
#   slurm_release ID                 start a requeued, held job now (see below)
#   joblog LOG                       the end of a job's output, $tmp/LOG.log (sbatch --output)
#   log_has LOG TEXT...              each TEXT is in that output; else fails showing its end
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

# slurm_here NODE CMD...: run a slurmd on this machine (the one-node cluster).
slurm_here() { shift; "$@"; }

slurm_start() {
  local dir=$1 cpus=$2 ctld_addr=$3 runner=$4 spec names=() addrs=() i
  shift 4
  for spec in "$@"; do names+=("${spec%%=*}"); addrs+=("${spec#*=}"); done
  [[ $(id -u) == 0 ]] || fail "the Slurm test starts slurmd, which needs root: run it as root (as CI does)"
  local missing=() c
  for c in munged slurmctld slurmd sbatch srun scontrol scancel sinfo squeue; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  [[ ${#missing[@]} == 0 ]] || fail "not installed: ${missing[*]} (apt-get install -y --no-install-recommends slurm-wlm munge; launch/setup.sh test does it)"
  slurm_dir=$dir
  mkdir -p "$dir"/{munge,state,spool,log,tmp}
  chmod 711 "$dir" "$dir/munge"
  # munge: a key of our own and a socket of our own (AuthInfo below points Slurm at it). The
  # socket is a file, so slurmds in other network namespaces reach the same munged.
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
  # Per node (%n): spool, pid and log files, and TmpFS, the /tmp of its jobs: PMIx makes a folder
  # of the same name for a step on every node (/tmp/spmix_appdir_0_1.0), which a /tmp shared by
  # nodes refuses on the second.
  {
    cat <<EOC
ClusterName=dtraintest$$
SlurmctldHost=$(hostname -s)($ctld_addr)
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
EOC
    for i in "${!names[@]}"; do
      echo "NodeName=${names[i]} NodeAddr=${addrs[i]} CPUs=$cpus RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=test Nodes=$(IFS=,; echo "${names[*]}") Default=YES MaxTime=INFINITE State=UP"
  } >"$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf
  # Give munged its socket before the daemons ask for credentials.
  for _ in $(seq 1 50); do [[ -S $dir/munge/socket ]] && break; sleep 0.1; done
  [[ -S $dir/munge/socket ]] || { cat "$dir/log/munged.log" >&2; fail "munged did not start"; }
  # Each daemon in a session of its own: a daemon's fatal error signals its process group.
  setsid slurmctld -D -f "$SLURM_CONF" >"$dir/log/slurmctld.out" 2>&1 &
  slurm_pids+=($!)
  local h
  for h in "${names[@]}"; do
    mkdir -p "$dir/spool/$h" "$dir/tmp/$h"
    "$runner" "$h" setsid slurmd -D -N "$h" -f "$SLURM_CONF" >"$dir/log/slurmd.$h.out" 2>&1 &
    slurm_pids+=($!)
  done
  local up=0 states=""
  for _ in $(seq 1 60); do
    states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    up=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l || true)
    ((up == ${#names[@]})) && break
    # A node that registered as down or unknown comes up when told to resume.
    for h in $(sinfo -h -N -t down,drain -o %N 2>/dev/null || true); do
      scontrol update nodename="$h" state=resume >/dev/null 2>&1 || true
    done
    sleep 0.5
  done
  if ((up != ${#names[@]})); then
    tail -n 20 "$dir"/log/*.log "$dir"/log/*.out >&2 || true
    fail "the Slurm node(s) did not come up (states: $states after 30 s)"
  fi
  echo "slurm: ${#names[@]} node(s) up (${names[*]}, $cpus CPUs each; slurmctld at $ctld_addr," \
    "ports $ctld_port/$slurmd_port, MpiDefault=pmix)"
}

slurm_cluster_start() { slurm_start "$1" "$2" 127.0.0.1 slurm_here "$(hostname -s)=127.0.0.1"; }

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
  local id=$1 secs=$2 state s
  shift 2
  for _ in $(seq 1 $((secs * 2))); do
    state=$(job_field "$id" JobState)
    for s in "$@"; do [[ $state == "$s" ]] && return 0; done
    sleep 0.5
  done
  fail "job $id: state '$state' after ${secs} s, expected one of: $*"
}

slurm_held() { [[ $(job_field "$1" JobState) == PENDING && $(job_field "$1" Reason) == BeginTime ]]; }

# Slurm holds a requeued job for 2 minutes before it may start again (its BeginTime); the tests
# release it at once, as an administrator can: once the job is held (its last run's steps may
# still be ending) and the steps of its last run are gone (what Slurm's hold waits for: a step of
# the same id started while the old one still cleans up fails to launch). Once in CI a released
# job did not start within 60 s, most likely held again by slurmctld when the requeue's last piece
# completed; so the release repeats while the job is held, until it leaves PENDING (60 s at most;
# the caller checks that it started).
slurm_release() {
  for _ in $(seq 1 120); do slurm_held "$1" && break; sleep 0.5; done
  slurm_held "$1" || fail "job $1 is not held after its requeue (state $(job_field "$1" JobState), reason $(job_field "$1" Reason))"
  for _ in $(seq 1 120); do
    pgrep -f "^slurmstepd: \[$1\." >/dev/null || break
    sleep 0.25
  done
  local i
  for i in $(seq 0 239); do
    [[ $(job_field "$1" JobState) == PENDING ]] || return 0
    if ((i % 4 == 0)) && slurm_held "$1"; then scontrol update jobid="$1" starttime=now; fi
    sleep 0.25
  done
}

joblog() { tail -n 40 "$tmp/$1.log" >&2 || true; }

log_has() {
  local log=$1 t
  shift
  for t in "$@"; do grep -qF -- "$t" "$tmp/$log.log" || { joblog "$log"; fail "$log: the job's output lacks '$t'"; }; done
}
