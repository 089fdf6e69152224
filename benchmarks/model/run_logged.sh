# Sourced by the step-comparison scripts of benchmarks/model: `load` prints the load average, `run LOG CMD...`
# echoes the command, runs it with its output kept in LOG, and on failure shows that output and stops the
# script (named by $0).
load() { cut -d' ' -f1-3 /proc/loadavg; }
run() {
  local log=$1
  shift
  echo "\$ $*"
  local start=$SECONDS
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "$(basename "$0"): command failed (output above, also in $log)" >&2
    exit 1
  fi
  echo "  ($((SECONDS - start)) s, load average now $(load))"
}
