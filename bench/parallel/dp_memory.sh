#!/usr/bin/env bash
# Per-rank memory and step time of data-parallel layouts next to the planner's
# prediction: ZeRO-0, 1 and 2 at 2 and 4 ranks (1 thread each), small model,
# global batch 16 (one micro-batch per rank, so ZeRO-2 stages its buckets).
# Measured: the optimizer state, the gradient buffers and the activation
# arena per rank (start-up lines), the peak resident memory of every rank and the median
# step time (plan.json); predicted: the planner's optimizer state, gradients,
# activations, peak and step time for the same layout on CLUSTER (default this-machine; a
# `strata calibrate` cluster file predicts this host far better).
#
# Usage: bench/parallel/dp_memory.sh [steps=6]   (STRATA, DATA, CLUSTER, BUCKET_MB override;
#   ZeRO-2 drops the whole gradient buffers only where two buckets are smaller than all of them:
#   BUCKET_MB=4 shows it on this 47 MiB model)
set -euo pipefail
cd "$(dirname "$0")/../.."
strata=${STRATA:-build/bin/strata}
steps=${1:-6}
data=${DATA:-data/kjv}
cluster=${CLUSTER:-this-machine}
bucket_mb=${BUCKET_MB:-25}
[[ -f "$data/meta.json" ]] || { echo "no corpus in $data: run scripts/quickstart.sh first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736
printf '%-16s %17s %17s %17s %13s %17s %19s\n' layout "optimizer MiB" "gradients MiB" "activations MiB" "peak RSS MiB" "planner peak MiB" "step s (pred/meas)"
for ranks in 2 4; do
  for zero in 0 1 2; do
    run=$work/dp${ranks}_zero$zero
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$ranks" -x GLIBC_TUNABLES "$strata" train \
      configs/bench/small.toml --set "data.dir=$data" --set "train.steps=$steps" --set train.batch_size=$((16 / ranks)) \
      --set train.global_batch=16 --set ops.threads=1 --set "parallel.zero=$zero" --set "parallel.cluster=$cluster" --set "parallel.bucket_mb=$bucket_mb" \
      --set "checkpoint.dir=$run" > "$run.log"
    /usr/bin/python3 - "$run" "$ranks" "$zero" <<'PY'
import json, re, sys
run, ranks, zero = sys.argv[1], sys.argv[2], sys.argv[3]
log = open(run + ".log").read()
optimizer = float(re.search(r"optimizer state ([0-9.]+) MiB per rank", log).group(1))
gradients = float(re.search(r"gradient buffers ([0-9.]+) MiB", log).group(1))
arena = float(re.search(r"arena ([0-9.]+) MiB", log).group(1))
record = json.load(open(run + "/plan.json"))
memory, measured = record["chosen"]["memory_bytes"], record["measured"]
mib = lambda b: b / 2**20
rss = "/".join(f"{x:.0f}" for x in measured["peak_rss_mib_per_rank"])
print(f"{'dp=' + ranks + ' zero=' + zero:<16} {optimizer:7.1f} / {mib(memory['optimizer']):7.1f} "
      f"{gradients:7.1f} / {mib(memory['gradients']):7.1f} "
      f"{arena:7.1f} / {mib(memory['activations']):7.1f} {rss:>13} {mib(memory['peak']):17.1f} "
      f"{record['chosen']['step_s']:8.3f} / {measured['step_s']:.3f}")
PY
  done
done
echo "(measured / predicted pairs; optimizer and activations: measured first)"
