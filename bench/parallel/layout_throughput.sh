#!/usr/bin/env bash
# Every parallel layout the runtime executes on 2 ranks x 1 thread against one
# process x 2 threads, the same global batch, interleaved repeats in one run:
# dp=2, tp=2, pp=2 (1F1B, GPipe, interleaved with 2 chunks per stage). Reports per layout the median tokens/s
# (steps after the first) and its ratio to one process, the exposed gradient
# communication (dp) and the first stage's pipeline wait against the
# (p-1)/(m+p-1) bubble of its schedule (pp), and the planner's predicted over
# measured step time on the this-machine cluster file (target within 15%).
#
# Usage: bench/parallel/layout_throughput.sh [repeats] [steps] [global_batch] [config]
#   (defaults 3, 8, 16, configs/bench/small.toml; STRATA overrides build/bin/strata;
#   DATA overrides data/kjv; CLUSTER overrides this-machine; MICRO the rows per micro-batch, 4)
set -euo pipefail
cd "$(dirname "$0")/../.."
strata=${STRATA:-build/bin/strata}
repeats=${1:-3}
steps=${2:-8}
global=${3:-16}
config=${4:-configs/bench/small.toml}
data=${DATA:-data/kjv}
cluster=${CLUSTER:-this-machine}
python=/usr/bin/python3
[[ -f "$data/meta.json" ]] || { echo "no corpus in $data: run scripts/quickstart.sh first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736
micro=${MICRO:-4}
common=("$config" --set "data.dir=$data" --set "train.steps=$steps" --set "parallel.cluster=$cluster"
        --set "train.batch_size=$micro" --set "train.global_batch=$global" --set train.val_every=0)
layouts=("single" "dp2" "tp2" "pp2_1f1b" "pp2_gpipe" "pp2_interleaved")
declare -A settings=(
  [single]="--set ops.threads=2"
  [dp2]="--set ops.threads=1"
  [tp2]="--set ops.threads=1 --set parallel.tp=2"
  [pp2_1f1b]="--set ops.threads=1 --set parallel.pp=2"
  [pp2_gpipe]="--set ops.threads=1 --set parallel.pp=2 --set parallel.schedule=gpipe"
  [pp2_interleaved]="--set ops.threads=1 --set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"
)

echo "# $config, global batch $global rows in micro-batches of $micro, $steps steps, $repeats interleaved repeats"
for r in $(seq "$repeats"); do
  for layout in "${layouts[@]}"; do
    launcher=()
    [[ $layout == single ]] || launcher=(mpirun --allow-run-as-root --bind-to none -np 2 -x GLIBC_TUNABLES)
    # shellcheck disable=SC2086
    "${launcher[@]}" "$strata" train "${common[@]}" ${settings[$layout]} --set "checkpoint.dir=$work/$layout.$r" \
      > "$work/$layout.$r.log"
  done
  echo "repeat $r done; load $(cut -d' ' -f1-3 /proc/loadavg)"
done
"$python" - "$work" "$repeats" "$global" "$micro" "${layouts[@]}" <<'PY'
import json, statistics, sys
work, repeats, global_batch, micro = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
layouts = sys.argv[5:]
def runs(layout):
    for r in range(1, repeats + 1):
        lines = [json.loads(l) for l in open(f"{work}/{layout}.{r}/metrics.jsonl")][1:]
        plan = json.load(open(f"{work}/{layout}.{r}/plan.json"))
        yield lines, plan
rates = {}
for layout in layouts:
    rate, wait, bubble, ratio = [], [], [], []
    for lines, plan in runs(layout):
        rate.append(statistics.median(l["tokens_per_s"] for l in lines))
        if "comm_wait_s" in lines[0]: wait.append(statistics.median(l["comm_wait_s"] for l in lines))
        if "pipeline_wait_s" in lines[0]:
            bubble.append(statistics.median(l["pipeline_wait_s"] * l["tokens_per_s"] * l["step"] / l["tokens"] for l in lines))
        if "step_s" in plan.get("chosen", {}) and "step_s" in plan.get("measured", {}):
            ratio.append(plan["chosen"]["step_s"] / plan["measured"]["step_s"])
    rates[layout] = statistics.median(rate)
    text = f"{layout:10s} {rates[layout]:9.1f} tokens/s  x{rates[layout] / rates['single']:.3f} of one process"
    if wait: text += f"; gradient-sum wait {statistics.median(wait) * 1000:.1f} ms/step"
    if bubble:
        m, p, v = global_batch // micro, 2, 2 if "interleaved" in layout else 1
        ideal = (p - 1) / (v * m + p - 1)
        text += f"; first stage waits {statistics.median(bubble):.3f} of the step (ideal bubble {ideal:.3f})"
    if ratio: text += f"; predicted / measured step {statistics.median(ratio):.2f}"
    print(text)
PY
if [[ $cluster == this-machine ]]; then
  # The shipped file is a conservative description (0.06 TFLOP/s per core assumed, several times below what
  # `strata calibrate` measures here), so its predictions run several times long.
  echo "predicted / measured used configs/clusters/this-machine.toml, an uncalibrated description: for a ratio"
  echo "that means something, run \`strata calibrate\` and pass its file as CLUSTER=<file>"
fi
