#!/usr/bin/env bash
# Checkpoint save and load bandwidth against the raw bandwidth of the same disk,
# measured in the same run: GPT-2 small (124M parameters; a checkpoint of its
# f32 weights and both AdamW moments, about 1.5 GB) saved after one step by one
# process and by 2 ranks in dp2, tp2 and pp2 (every rank writes its own pieces,
# fsynced), then loaded by a resume in the same layout from a cold page cache
# (the files are evicted first with dd iflag=nocache; the load rate is every
# rank's bytes over the slowest rank's time, as they read at once). The disk's reference is
# dd: a write of the same size with conv=fsync, and a cold read of it, run
# right after each save and load, while the checkpoint is still on disk (on
# this VM, writing into page-cache pages a deletion has just freed runs 4x
# faster than a save, which needs new ones, can). The disk's bandwidth also
# swings from one minute to the next, so every layout repeats (default 3
# times, interleaved) and the medians are compared. Target: save and load at >= 80%
# of dd.
#
# Usage: bench/ckpt/save_load.sh [repeats] [work_dir]   (STRATA overrides build/bin/strata; DATA overrides data/kjv;
#   the work directory, default a fresh one under /var/tmp, must be on the disk to measure)
set -euo pipefail
cd "$(dirname "$0")/../.."
strata=${STRATA:-build/bin/strata}
data=${DATA:-data/kjv}
[[ -f "$data/meta.json" ]] || { echo "no corpus in $data: run scripts/quickstart.sh first" >&2; exit 1; }
repeats=${1:-3}
work=${2:-$(mktemp -d /var/tmp/strata_ckpt_bench.XXXX)}
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
common=(configs/bench/gpt2_small.toml --set "data.dir=$data" --set train.val_every=0 --set checkpoint.every=0
        --set train.warmup_steps=0)
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)

evict() { local file; for file in "$@"; do dd if="$file" iflag=nocache count=0 status=none; done; }
mbps() { python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]) / 1e6:.0f}')" "$1" "$2"; }

median() { python3 -c "import statistics, sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
declare -A saves loads raw_writes raw_reads sizes read_sizes
layouts=(single dp2 tp2 pp2)
for repeat in $(seq 1 "$repeats"); do
  for layout in "${layouts[@]}"; do
    case $layout in
      single) launch=(); settings=() ;;
      dp2) launch=("${mpi[@]}"); settings=(--set ops.threads=1 --set train.global_batch=2) ;;
      tp2) launch=("${mpi[@]}"); settings=(--set ops.threads=1 --set parallel.tp=2) ;;
      pp2) launch=("${mpi[@]}"); settings=(--set ops.threads=1 --set parallel.pp=2 --set train.global_batch=2) ;;
    esac
    run="$work/$layout"
    rm -rf "$run"
    "${launch[@]}" "$strata" train "${common[@]}" "${settings[@]}" --set train.steps=1 --set "checkpoint.dir=$run" \
      > "$work/$layout.save.log" 2>&1 || { tail -5 "$work/$layout.save.log"; exit 1; }
    read -r mib save_s < <(sed -n 's/^checkpoint step_00000001: \([0-9.]*\) MiB in \([0-9.]*\) s.*/\1 \2/p' "$work/$layout.save.log")
    bytes=$(python3 -c "print(int(float('$mib') * 2**20))")
    evict "$run"/step_00000001/*
    "${launch[@]}" "$strata" train "${common[@]}" "${settings[@]}" --set train.steps=2 --set checkpoint.resume=true \
      --set "checkpoint.dir=$run" > "$work/$layout.load.log" 2>&1 || { tail -5 "$work/$layout.load.log"; exit 1; }
    read -r read_mib load_s < <(sed -n 's/^resumed from .* (every rank read \([0-9.]*\) MiB in \([0-9.]*\) s.*/\1 \2/p' "$work/$layout.load.log")
    read_bytes=$(python3 -c "print(int(float('$read_mib') * 2**20))")
    # The disk, the same sizes, now, with the checkpoint still on it: a file written into pages that a
    # deletion just freed is several times faster on this VM than one needing new page-cache pages, as
    # a save does; keeping the checkpoint makes dd allocate new pages too.
    blocks=$(( (bytes > read_bytes ? bytes : read_bytes) / 16777216 + 1 ))
    start_s=$(date +%s.%N)
    dd if=/dev/zero of="$work/dd.bin" bs=16M count=$blocks conv=fsync status=none
    dd_write=$(python3 -c "print($(date +%s.%N) - $start_s)")
    evict "$work/dd.bin"
    read_blocks=$((read_bytes / 16777216 + 1))
    start_s=$(date +%s.%N)
    dd if="$work/dd.bin" of=/dev/null bs=16M count=$read_blocks status=none
    dd_read=$(python3 -c "print($(date +%s.%N) - $start_s)")
    rm -rf "$work/dd.bin" "$run"
    saves[$layout]+=" $(mbps "$bytes" "$save_s")"
    loads[$layout]+=" $(mbps "$read_bytes" "$load_s")"
    raw_writes[$layout]+=" $(mbps $((blocks * 16777216)) "$dd_write")"
    raw_reads[$layout]+=" $(mbps $((read_blocks * 16777216)) "$dd_read")"
    sizes[$layout]=$mib
    read_sizes[$layout]=$read_mib
  done
  echo "repeat $repeat done"
done
printf "%-8s %10s %9s %9s %6s %9s %9s %6s\n" layout checkpoint "save MB/s" "dd write" "ratio" "load MB/s" "dd read" "ratio"
for layout in "${layouts[@]}"; do
  save=$(median ${saves[$layout]}); load=$(median ${loads[$layout]})
  raw_write=$(median ${raw_writes[$layout]}); raw_read=$(median ${raw_reads[$layout]})
  printf "%-8s %6.0f MiB %9.0f %9.0f %6.2f %9.0f %9.0f %6.2f   (every rank read %.0f MiB; save MB/s per repeat:%s)\n" \
    "$layout" "${sizes[$layout]}" "$save" "$raw_write" "$(python3 -c "print($save / $raw_write)")" "$load" "$raw_read" \
    "$(python3 -c "print($load / $raw_read)")" "${read_sizes[$layout]}" "${saves[$layout]}"
done
