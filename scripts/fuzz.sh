#!/usr/bin/env bash
# Fuzzes every parser of untrusted input (tests/fuzz/fuzz_targets.h: safetensors
# files, token shards, meta.json, checkpoint.json, TOML configs, tokenizer.json, config.json) with libFuzzer
# under AddressSanitizer and UBSan, SECONDS each (default 60), starting from
# tests/fuzz/corpus/ (inputs found are kept in the work directory, not in the
# repository). Not part of .ci/run. Prints executions and crashes per parser;
# exits non-zero on any crash. A crashing input worth keeping goes into
# tests/fuzz/corpus/<target>/, which CTest replays on every run.
#
# Usage: scripts/fuzz.sh [SECONDS]   (STRATA_FUZZ_BUILD_DIR, default build-fuzz; FUZZ_WORK, default a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build=${STRATA_FUZZ_BUILD_DIR:-build-fuzz}
work=${FUZZ_WORK:-$(mktemp -d)}
targets=(safetensors token_shard meta_json checkpoint_json train_config tokenizer_json hf_config)

bash scripts/setup.sh --packages-only
missing=()
for package in clang libomp-dev; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_FUZZ=ON > /dev/null
ninja -C "$build" test_fuzz_corpus "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
echo "# the regression corpus under ASan/UBSan"
"$build/tests/fuzz/test_fuzz_corpus"
status=0
for target in "${targets[@]}"; do
  mkdir -p "$work/$target" "$work/crashes/$target"
  cp -n tests/fuzz/corpus/"$target"/* "$work/$target/" 2>/dev/null || true
  log="$work/$target.log"
  if "$build/tests/fuzz/fuzz_$target" "$work/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -max_len=65536 -artifact_prefix="$work/crashes/$target/" -print_final_stats=1 > "$log" 2>&1; then
    verdict="0 crashes"
  else
    verdict="CRASH: $(ls "$work/crashes/$target" | head -1) (see $log)"
    status=1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  echo "$target: $runs executions in ${seconds} s, $verdict"
done
echo "work directory: $work"
exit $status
