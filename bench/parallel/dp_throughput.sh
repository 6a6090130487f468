#!/usr/bin/env bash
# Data parallelism against one process on the same cores: 2 ranks x 1 thread
# against 1 process x 2 threads, the same global batch, interleaved repeats
# in one run. Reports the median tokens/s of each layout (steps after the
# first), their ratio (target >= 0.95), and the 2-rank run's median
# `comm_wait_s` (gradient-sum time the backward pass did not hide).
#
# Usage: bench/parallel/dp_throughput.sh [repeats] [steps] [global_batch]
#   (defaults 3, 8, 16; STRATA overrides build/bin/strata; DATA overrides data/kjv;
#   ZERO=1 or 2 runs the 2 ranks under that ZeRO stage)
set -euo pipefail
cd "$(dirname "$0")/../.."
strata=${STRATA:-build/bin/strata}
repeats=${1:-3}
steps=${2:-8}
global=${3:-16}
data=${DATA:-data/kjv}
zero=${ZERO:-0}
python=/usr/bin/python3
[[ -f "$data/meta.json" ]] || { echo "no corpus in $data: run scripts/quickstart.sh first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The same allocator setting for both sides (see ../shared/README.md: fresh pages are slow here).
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736
common=(configs/bench/small.toml --set "data.dir=$data" --set "train.steps=$steps"
        --set train.batch_size=8 --set "train.global_batch=$global")

summary() {  # run dir -> "tokens_per_s comm_wait_s" medians over steps after the first
  "$python" - "$1/metrics.jsonl" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])][1:]
rate = statistics.median(l["tokens_per_s"] for l in lines)
wait = [l["comm_wait_s"] for l in lines if "comm_wait_s" in l]
print(f"{rate:.1f} {statistics.median(wait) if wait else 0:.4f}")
PY
}

echo "# small model, global batch $global rows x 256 tokens, $steps steps, $repeats interleaved repeats, 2 ranks at ZeRO-$zero"
single_rates=() dp_rates=() waits=()
for r in $(seq "$repeats"); do
  "$strata" train "${common[@]}" --set ops.threads=2 --set "checkpoint.dir=$work/single$r" > "$work/single$r.log"
  read -r rate _ < <(summary "$work/single$r")
  single_rates+=("$rate")
  mpirun --allow-run-as-root --bind-to none -np 2 -x GLIBC_TUNABLES "$strata" train "${common[@]}" \
    --set ops.threads=1 --set "parallel.zero=$zero" --set "checkpoint.dir=$work/dp$r" > "$work/dp$r.log"
  read -r rate wait < <(summary "$work/dp$r")
  dp_rates+=("$rate"); waits+=("$wait")
  echo "repeat $r: 1 process x 2 threads ${single_rates[-1]} tokens/s; 2 ranks x 1 thread $rate tokens/s" \
       "(gradient-sum wait $wait s/step); load $(cut -d' ' -f1-3 /proc/loadavg)"
done
"$python" - "${single_rates[*]}" "${dp_rates[*]}" "${waits[*]}" <<'PY'
import statistics, sys
single, dp, wait = ([float(x) for x in a.split()] for a in sys.argv[1:4])
s, d = statistics.median(single), statistics.median(dp)
print(f"median: 1x2 {s:.1f} tokens/s, 2x1 {d:.1f} tokens/s, ratio {d / s:.3f} (target >= 0.95); "
      f"gradient-sum wait {statistics.median(wait) * 1000:.1f} ms/step")
PY
