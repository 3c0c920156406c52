# Sourced by launch/mpirun-local.sh and launch/mpirun-hosts.sh (not run): mpirun's standard error
# without the Open MPI blocks that only repeat, at length, that a rank ended with a non-zero exit
# code or called MPI_Abort ("Primary job terminated normally, but 1 process returned a non-zero
# exit code...", "mpirun detected that one or more processes exited with non-zero status...",
# "MPI_ABORT was invoked on rank..."): dtrain has said why in its own line, and the script says
# the exit code. Every other block of mpirun's (not enough slots, a rank killed by a signal, a
# host it cannot reach) and every other line passes through as it comes.

# The blocks' first lines, after their line of dashes.
mpirun_exit_block() {
  case $1 in
    "Primary job"*"terminated normally"* | "mpirun detected that one or more processes exited with non-zero status"* | \
      "MPI_ABORT was invoked on rank"*) return 0 ;;
  esac
  return 1
}

# Standard input to standard output, line by line, without those blocks, Open MPI's "N more
# processes have sent help message" notes about them (with or without its "[host:pid] " prefix),
# its ORTE_ERROR_LOG lines once a dtrain rank has printed its error line, and "mpirun:
# Forwarding signal 10 to job" (run_mpirun's own line says the stop).
drop_mpirun_exit_blocks() {
  local line held="" skipping=0 failed=0
  while IFS= read -r line || [[ -n $line ]]; do
    if ((skipping)); then
      [[ $line =~ ^-{20,}$ ]] && skipping=0
      continue
    fi
    if [[ -n $held ]]; then
      if mpirun_exit_block "$line"; then
        held="" skipping=1
        continue
      fi
      printf '%s\n' "$held"
      held=""
    fi
    if [[ $line =~ ^-{20,}$ ]]; then
      held=$line
      continue
    fi
    case $line in
      *"more process"*"sent help message help-mpi-api.txt / mpi-abort"* | \
        *"more process"*"sent help message help-errmgr-base.txt"* | \
        *'Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / error messages' | \
        "mpirun: Forwarding signal 10 to job") continue ;;
      # After dtrain's own error line, Open MPI's complaints about the job it ends
      # (ORTE_ERROR_LOG: "Out of resource", "Data unpack would read past end of buffer").
      *"ORTE_ERROR_LOG"*) ((failed)) && continue ;;
      "[rank "*"] error: "*) failed=1 ;;
    esac
    printf '%s\n' "$line"
  done
  [[ -z $held ]] || printf '%s\n' "$held"
}

# interrupt_ranks JOB: a second Ctrl-C. SIGINT to mpirun would make it return 1 whatever the
# ranks exit with (Open MPI 4.1), even after they have stopped with 75, so SIGINT goes to the
# ranks this host runs, mpirun's children: dtrain ends at once on a second signal, and mpirun
# returns their status (75 when they had already stopped). Ranks on other hosts (children that
# are ssh or rsh) can only be reached through mpirun: it gets SIGINT then.
interrupt_ranks() {
  local pid comm remote=0
  for pid in $(pgrep -P "$1" || true); do
    comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
    case $comm in
      ssh | rsh) remote=1 ;;
      *) kill -INT "$pid" 2>/dev/null || true ;;
    esac
  done
  if ((remote)); then kill -INT "$1" 2>/dev/null || true; fi
}

# run_mpirun NAME ARGS...: runs `mpirun ARGS...` with its standard error through
# drop_mpirun_exit_blocks, says "NAME: exit RC" on standard error when it ends with RC != 0, and
# exits with RC. Ctrl-C and SIGTERM: mpirun would end the ranks at once (Open MPI cannot forward
# SIGINT or SIGTERM), so mpirun runs in its own session and the first Ctrl-C or SIGTERM becomes
# SIGUSR1, which mpirun forwards to every rank: dtrain saves a checkpoint at the next step
# boundary and exits 75. A second Ctrl-C ends the ranks at once (interrupt_ranks), and the exit
# status is still the ranks' own; a third one ends mpirun.
run_mpirun() {
  local name=$1 fifo filter job stops=0
  shift
  fifo=$(mktemp -u "${TMPDIR:-/tmp}/$name.XXXXXX")
  mkfifo -m 600 "$fifo"
  # The filter ignores Ctrl-C and SIGTERM: it ends when mpirun closes its standard error.
  (trap '' INT TERM; drop_mpirun_exit_blocks <"$fifo" >&2) &
  filter=$!
  setsid mpirun "$@" 2>"$fifo" &
  job=$!
  stop() {
    stops=$((stops + 1))
    if ((stops == 1)); then
      echo "$name: stopping: every rank saves a checkpoint at the next step (Ctrl-C again to end at once)" >&2
      kill -USR1 "$job" 2>/dev/null || true
    elif ((stops == 2)); then
      interrupt_ranks "$job"
    else
      kill -INT "$job" 2>/dev/null || true
    fi
  }
  trap stop INT TERM
  rc=0
  while kill -0 "$job" 2>/dev/null; do
    wait "$job" && rc=0 || rc=$?
  done
  while kill -0 "$filter" 2>/dev/null; do wait "$filter" || true; done
  rm -f "$fifo"
  if ((rc != 0)); then echo "$name: exit $rc" >&2; fi
  exit "$rc"
}
