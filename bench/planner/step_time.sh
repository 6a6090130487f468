#!/usr/bin/env bash
# Predicted vs measured training step time and activation memory of
# single-process runs on this machine, over model sizes and micro-batch sizes.
# Calibrates first (or uses PROFILE=file), then for every case trains a few
# steps on the prepared corpus (data/kjv) and asks `strata plan` for the same
# layout with the calibrated profile. Measured step times are the median and
# the fastest of the steps after the first two (warm-up): calibration keeps
# each kernel's fastest run, so on a machine shared with other work the
# fastest step is the like-for-like figure. The arena is what the trainer reports.
# Usage: bench/planner/step_time.sh [steps] [threads]   (STRATA, PROFILE, DATA override)
set -euo pipefail
cd "$(dirname "$0")/../.."
strata=${STRATA:-build/bin/strata}
steps=${1:-8}
threads=${2:-$(nproc)}
data=${DATA:-data/kjv}
python=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[[ -f "$data/meta.json" ]] || { echo "no corpus in $data: run scripts/quickstart.sh or strata data prepare" >&2; exit 1; }
vocab=$("$python" -c "import json, sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$data/meta.json")
profile=${PROFILE:-$work/calibrated-cluster.toml}
if [[ ! -f "$profile" ]]; then
  "$strata" calibrate --out "$profile" --threads "1,$threads" --dtypes f32
fi

# layers heads width context micro-batch (two micro-batches per step)
cases=(
  "2 4 128 64 16"
  "2 4 128 64 64"
  "4 4 256 128 8"
  "4 4 256 128 16"
  "6 6 384 256 4"
  "6 6 384 256 8"
)
printf "%-22s %9s %9s %6s %9s %6s %11s %11s %6s\n" case predicted median ratio fastest ratio "arena pred" "arena meas" ratio
for spec in "${cases[@]}"; do
  read -r layers heads width context micro <<< "$spec"
  config=$work/case.toml
  cat > "$config" <<TOML
[model]
n_layer = $layers
n_head = $heads
n_embd = $width
vocab_size = $vocab
block_size = $context
[data]
dir = "$data"
[ops]
threads = $threads
[train]
batch_size = $micro
global_batch = $((2 * micro))
steps = $steps
warmup_steps = 1
val_every = 0
[checkpoint]
dir = "$work/run"
every = 0
resume = false
TOML
  rm -rf "$work/run"
  "$strata" train "$config" > "$work/train.log" 2>&1
  "$strata" plan "$config" "$profile" --threads "$threads" --devices 1 --dtype f32 --micro-batch "$micro" \
    --recompute none --json --top 1 > "$work/plan.json"
  "$python" - "$work" "L$layers h$width s$context mb$micro" "$((2 * micro * context))" <<'PY'
import json, re, statistics, sys
work, name, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
steps = [json.loads(line) for line in open(f"{work}/run/metrics.jsonl")]
times = [tokens / s["tokens_per_s"] for s in steps[2:]]
median, fastest = statistics.median(times), min(times)
plan = json.load(open(f"{work}/plan.json"))["plans"][0]
predicted = plan["step_s"]
log = open(f"{work}/train.log").read()
arena_mib = float(re.search(r"arena ([0-9.]+) MiB", log).group(1))
memory = plan["memory_bytes"]
arena_pred = max(memory["activations"], memory["gradient_staging"]) / 2**20
print(f"{name:<22} {predicted:8.3f}s {median:8.3f}s {predicted / median:6.2f} {fastest:8.3f}s "
      f"{predicted / fastest:6.2f} {arena_pred:8.1f}MiB {arena_mib:8.1f}MiB {arena_pred / arena_mib:6.2f}")
PY
done
