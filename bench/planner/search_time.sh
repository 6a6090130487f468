#!/usr/bin/env bash
# Search time of the planner on the issue's benchmark: a 1-trillion-parameter
# GPT (Narayanan et al.'s 1T configuration, global batch 3072) on 384 DGX A100
# nodes (3072 devices) with every dimension open. Prints the planner's own
# search time and candidate count per run, and the wall time of the command.
# The search time is wall-clock: on a shared host it grows with the load (0.23 s of CPU read 0.3-0.5 s
# with the 2-core host loaded 2-3x), so compare two binaries in interleaved runs on the same host, or
# their CPU time (perf stat -e task-clock).
# Usage: bench/planner/search_time.sh [runs]   (STRATA=path/to/strata to override)
set -euo pipefail
cd "$(dirname "$0")/../.."
strata=${STRATA:-build/bin/strata}
runs=${1:-3}
python=/usr/bin/python3
for run in $(seq 1 "$runs"); do
  start=$(date +%s.%N)
  "$strata" plan gpt-1t dgx-a100-80gb --nodes 384 --json --top 3 > /tmp/strata_search_time.json
  end=$(date +%s.%N)
  "$python" - "$start" "$end" <<'PY'
import json, sys
report = json.load(open("/tmp/strata_search_time.json"))
best = report["plans"][0]
print(f"search {report['search_s']:.3f} s over {report['candidates']} candidates "
      f"({report['feasible']} fit), command wall {float(sys.argv[2]) - float(sys.argv[1]):.3f} s; "
      f"best: {best['plan']['description']}, predicted step {best['step_s']:.1f} s, MFU {100 * best['mfu']:.1f}%")
PY
done
rm -f /tmp/strata_search_time.json
