#!/usr/bin/env bash
# Collective failures, as they happen: a rank is killed (SIGKILL) in the middle
# of a large all_reduce, or just before making it, while mpirun keeps the job
# alive (--mca orte_abort_on_non_zero_status 0), so that only Strata's own
# timeout can end the survivors. For every algorithm (and the MPI library's
# blocking collective that comm-bench compares against) and TRIALS times each,
# the survivors must all end within LIMIT seconds: with the timeout error
# naming the call and the peer (the first survivor to time out aborts the job),
# or, when the dead rank's data had already arrived, with the right result. Prints a line per algorithm; exit 0 when every
# trial passed.
#
# Usage: scripts/rank_kill_trials.sh [TRIALS] [BUILD_DIR]   (default 5, build)
set -uo pipefail
cd "$(dirname "$0")/.."
trials=${1:-5}
build=$(cd "${2:-build}" && pwd)
probe=$build/tests/comm/comm_failure_probe
tool=$build/bin/strata-comm
[[ -x $probe && -x $tool ]] || { echo "rank_kill_trials: build first (ninja -C build)" >&2; exit 1; }
export STRATA_COMM_TIMEOUT=3
limit=20  # seconds: the 3 s timeout, start-up and tear-down, with room for a loaded machine
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Runs one job in the background; returns when every rank has ended (mpirun itself may linger:
# with the flag above it waits for a dead rank's cleanup) or after the limit. Sets `elapsed`, `hung`.
run_job() {
  local start=$SECONDS
  mpirun --allow-run-as-root --oversubscribe --mca orte_abort_on_non_zero_status 0 "$@" > "$log" 2>&1 &
  local launcher=$!
  sleep 1
  hung=1
  while ((SECONDS - start < limit)); do
    if ! kill -0 "$launcher" 2> /dev/null || [[ -z $(pgrep -P "$launcher") ]]; then hung=0; break; fi
    sleep 0.1
  done
  elapsed=$((SECONDS - start))
  pkill -9 -P "$launcher" 2> /dev/null
  kill -9 "$launcher" 2> /dev/null
  wait "$launcher" 2> /dev/null
}

failed=0
for algorithm in ring rhd recursive_doubling binomial hierarchical shm direct mpi baseline; do
  ok=0 slowest=0 outcomes=""
  for ((trial = 1; trial <= trials; ++trial)); do
    for when in killed killed-before; do
      if [[ $algorithm == baseline ]]; then
        [[ $when == killed ]] || continue
        run_job -np 2 bash tests/comm/failure/kill_rank1_during.sh "$tool"
        survivors=1
      elif [[ $algorithm == hierarchical ]]; then
        # Two simulated nodes of two ranks: the only shape hierarchical runs on.
        run_job -x STRATA_COMM_RANKS_PER_NODE=2 -np 4 "$probe" "$when" "$algorithm"
        survivors=3
      else
        run_job -np 3 "$probe" "$when" "$algorithm"
        survivors=2
      fi
      timed_out=$(grep -c 'no progress for 3.0 s (the timeout)' "$log")
      finished=$(grep -c '^rank [0-9] finished' "$log")
      peer_gone=$(grep -c 'cannot read the input of peer' "$log")
      ((elapsed > slowest)) && slowest=$elapsed
      # The first survivor to time out brings the job down with MPI_Abort, often before the others print.
      if ((hung == 0 && (timed_out + peer_gone >= 1 || finished >= survivors))); then
        ok=$((ok + 1))
        ((timed_out > 0)) && outcomes+=" timeout" || { ((peer_gone > 0)) && outcomes+=" peer-gone" || outcomes+=" finished"; }
      else
        echo "  $algorithm $when trial $trial FAILED (hung=$hung after ${elapsed} s):"
        tail -5 "$log" | sed 's/^/    /'
        failed=$((failed + 1))
      fi
    done
  done
  [[ $algorithm == baseline ]] && runs=$trials || runs=$((2 * trials))
  summary=$(tr ' ' '\n' <<< "$outcomes" | sed '/^$/d' | sort | uniq -c | awk '{printf "%s%s %s", sep, $1, $2; sep=", "}')
  echo "$algorithm: $ok/$runs jobs ended on every rank within ${limit} s (slowest ${slowest} s; $summary)"
done
exit $((failed > 0))
