#!/usr/bin/env bash
# Crash safety, as a user would try it: kill -9 a training run at random
# moments (it saves a checkpoint every step, so most kills land in or near a
# save), then resume it with the same command, N times over one run directory.
# After every kill the newest complete checkpoint must load and the resumed run
# must go on; at the end the run's final checkpoint must be bit-identical to
# that of a straight run that was never killed, and no temporary directory of
# a dead save may be left. Prints one line per trial and a summary; exit 0 when
# every trial passed.
#
# Usage: scripts/crash_trials.sh [TRIALS] [BUILD_DIR]   (default 50 trials, build)
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-50}
build=$(cd "${2:-build}" && pwd)
strata=$build/bin/strata
[[ -x $strata ]] || { echo "crash_trials: no $strata: build first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A small corpus and model: a step and a save each take a few milliseconds.
python3 - "$work/corpus.txt" <<'EOF'
import sys
verses = ["In the beginning God created the heaven and the earth.", "And the earth was without form, and void.",
          "And God said, Let there be light: and there was light.", "And God saw the light, that it was good."]
open(sys.argv[1], "w").write("".join(f"{verses[i % 4]} {i}\n" for i in range(2000)))
EOF
"$strata" data prepare "$work/corpus.txt" --out "$work/data" --vocab-size 320 > /dev/null
steps=$((trials * 40 + 40))
cat > "$work/job.toml" <<EOF
[model]
n_layer = 2
n_head = 2
n_embd = 64
vocab_size = 320
block_size = 32
[data]
dir = "$work/data"
[ops]
threads = 1
[train]
batch_size = 2
global_batch = 4
steps = $steps
val_every = 0
[checkpoint]
every = 1
keep = 2
EOF

"$strata" train "$work/job.toml" --set checkpoint.dir="$work/straight" > "$work/straight.log" 2>&1
final=$(printf 'step_%08d' "$steps")

failed=0 mid_save=0 last_step=0
for ((trial = 1; trial <= trials; ++trial)); do
  "$strata" train "$work/job.toml" --set checkpoint.dir="$work/killed" > "$work/trial.log" 2>&1 &
  pid=$!
  # Kill once it trains (after start-up), at a random moment within the next steps and saves.
  for ((wait = 0; wait < 1000; ++wait)); do
    grep -q '^step' "$work/trial.log" 2> /dev/null && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.01
  done
  sleep "$(python3 -c 'import random; print(round(random.uniform(0, 0.25), 3))')"
  if ! kill -9 "$pid" 2> /dev/null; then
    wait "$pid" && status=0 || status=$?
    echo "trial $trial: FAILED: the run ended by itself (status $status) before the kill:"
    tail -5 "$work/trial.log"
    failed=$((failed + 1))
    continue
  fi
  wait "$pid" 2> /dev/null || true
  resumed=$(sed -n 's/^resumed from .* at step \([0-9]*\)$/\1/p' "$work/trial.log")
  temporaries=$(find "$work/killed" -maxdepth 1 -name '.step_*.tmp*' | wc -l)
  ((temporaries > 0)) && mid_save=$((mid_save + 1))
  verdict=ok
  if ((trial > 1)) && [[ -z $resumed ]]; then verdict="FAILED: did not resume"; fi
  if [[ -n $resumed ]] && ((resumed < last_step)); then verdict="FAILED: resumed at $resumed after $last_step"; fi
  [[ $verdict == ok ]] || failed=$((failed + 1))
  echo "trial $trial: resumed at step ${resumed:-0}, killed at $(grep -c '^step' "$work/trial.log" || true) steps" \
       "later$( ((temporaries > 0)) && echo ', inside a save')"; [[ $verdict == ok ]] || echo "  $verdict"
  last_step=${resumed:-0}
done

# Finish the killed run; it must end exactly where the straight one did.
"$strata" train "$work/job.toml" --set checkpoint.dir="$work/killed" > "$work/finish.log" 2>&1 ||
  { echo "FAILED: the final resume did not finish:"; tail -5 "$work/finish.log"; exit 1; }
identical=yes
cmp -s "$work/straight/$final/rank_00000.safetensors" "$work/killed/$final/rank_00000.safetensors" || identical=no
left=$(find "$work/killed" -maxdepth 1 -name '.step_*.tmp*' | wc -l)
echo "crash_trials: $((trials - failed))/$trials kills resumed from a complete checkpoint ($mid_save inside a save);" \
     "final checkpoint bit-identical to a run never killed: $identical; dead saves' temporaries left: $left"
[[ $failed -eq 0 && $identical == yes && $left -eq 0 ]]
