#!/usr/bin/env bash
# The communication layer against the MPI library in the same run, as issue 36
# measures it: for each rank count (default 2 and 4, oversubscribed on small
# hosts), all_reduce, all_to_all and all_to_all_v (equal shares and skewed
# 1/(j+1) shares) from 4 KiB to 64 MiB, Strata's `auto` against the faster of
# MPI's two forms (the polled non-blocking collective and the plain blocking
# call), with the bus-bandwidth ratio and the cost model's error per size.
#
# Usage: bench/comm/compare_with_mpi.sh [--no-calibrate] [--launches N] [RANKS...]
# Each rank count starts with three fresh link probes (the cache holds their
# median figures) and, unless --no-calibrate, a
# calibration run (every one-host all_reduce algorithm and the pairwise
# all-to-all) whose fitted scales land in the probe cache, so the measurement's
# `auto` choices and predictions use them (on a shared host the fit reflects
# the load of its moment). Targets: ratio >= 1.0 at every size; model error
# within 25% for the all-to-alls. With --launches N (default 1) each
# collective is measured in N launches and a cell gives the median over them
# of each launch's ratio and model error, with the ratios' range beside it:
# on a shared host one launch's cells move by 20% and more from the next's
# (fresh processes, fresh shared pages), both sides alike.
set -euo pipefail
cd "$(dirname "$0")/../.."
calibrate=1
launches=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-calibrate) calibrate=0; shift ;;
    --launches) launches=${2:-}; shift $(( $# > 1 ? 2 : 1 )) ;;
    *) break ;;
  esac
done
[[ "$launches" =~ ^[1-9][0-9]*$ ]] || { echo "--launches takes a positive whole number, not '$launches'" >&2; exit 2; }
ranks=("$@")
[[ ${#ranks[@]} -gt 0 ]] || ranks=(2 4)
exe=build/bin/strata
[[ -x "$exe" ]] || exe=build/bin/strata-comm
# The same allocator setting on both sides: glibc otherwise returns big blocks
# to the kernel on free, and first touches of fresh memory are slow here.
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736
run() {  # RANKS comm-bench options...
  local n=$1
  shift
  mpirun --allow-run-as-root --oversubscribe -np "$n" -x GLIBC_TUNABLES "$exe" "$@"
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for n in "${ranks[@]}"; do
  # A fresh probe, then the two more that the cache's figures settle on (their median: src/comm/probe_history.h).
  STRATA_COMM_REPROBE=1 mpirun --allow-run-as-root --oversubscribe -np "$n" -x STRATA_COMM_REPROBE "$exe" topo > /dev/null
  for settling in 2 3; do mpirun --allow-run-as-root --oversubscribe -np "$n" "$exe" topo > /dev/null; done
  if [[ $calibrate == 1 ]]; then
    # Measured as the comparison runs: interleaved with the MPI baselines
    # (which evict each other's data from the caches), the same iterations.
    run "$n" comm-bench -o all_reduce -b 4K -e 64M -f 2 \
      -a ring,rhd,recursive_doubling,binomial,shm,direct,direct_split,baseline,baseline-blocking --calibrate > /dev/null
    run "$n" comm-bench -o all_to_all -b 4K -e 64M -f 2 -a pairwise,baseline,baseline-blocking --calibrate > /dev/null
  fi
  for ((launch = 0; launch < launches; ++launch)); do
    run "$n" comm-bench -o all_reduce -b 4K -e 64M -f 4 --json "$work/all_reduce-$n-$launch.json" > /dev/null
    run "$n" comm-bench -o all_to_all -b 4K -e 64M -f 4 --json "$work/all_to_all-$n-$launch.json" > /dev/null
    run "$n" comm-bench -o all_to_all_v -b 4K -e 64M -f 4 --json "$work/all_to_all_v-$n-$launch.json" > /dev/null
    run "$n" comm-bench -o all_to_all_v --skew 1 -b 4K -e 64M -f 4 --json "$work/all_to_all_v_skew-$n-$launch.json" \
      > /dev/null
  done
done
/usr/bin/python3 - "$work" "$launches" "${ranks[@]}" <<'PY'
import json, os, statistics, sys
work, launches, ranks = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ops = [("all_reduce", "all_reduce"), ("all_to_all", "all_to_all"), ("all_to_all_v", "all_to_all_v, equal shares"),
       ("all_to_all_v_skew", "all_to_all_v, skew 1")]
missed = []
def cells(path):
    """Per size: auto's row, the faster MPI form's row and the wrong results of one launch."""
    rows = {}
    for row in json.load(open(path))["rows"]:
        rows.setdefault(row["bytes"], {})[row["algorithm"]] = row
    out = {}
    for size, by_algorithm in rows.items():
        mpi = max((by_algorithm[name] for name in ("baseline", "baseline-blocking")), key=lambda r: r["busbw_GBps"])
        out[size] = (by_algorithm["auto"], mpi, sum(r["wrong"] for r in by_algorithm.values()))
    return out


for n in ranks:
    for key, title in ops:
        runs = [cells(os.path.join(work, f"{key}-{n}-{launch}.json")) for launch in range(launches)]
        what = "" if launches == 1 else f"; medians over {launches} launches, the ratio's range in brackets"
        print(f"\n## {title}, {n} ranks (busbw GB/s; ratio = auto / the faster MPI form{what})")
        print(f"{'size':>10} {'auto ran':>10} {'auto':>8} {'MPI':>8} {'MPI form':>9} {'ratio':>6} {'model err':>10}")
        for size in sorted(runs[0]):
            launched = [run[size] for run in runs]
            ratios = [auto["busbw_GBps"] / mpi["busbw_GBps"] for auto, mpi, _ in launched]
            errors = [(auto["predicted_us"] - auto["time_us"]) / auto["time_us"] * 100 if auto["predicted_us"]
                      else float("nan") for auto, _, _ in launched]
            ratio, error = statistics.median(ratios), statistics.median(errors)
            auto_busbw = statistics.median(auto["busbw_GBps"] for auto, _, _ in launched)
            mpi_busbw = statistics.median(mpi["busbw_GBps"] for _, mpi, _ in launched)
            ran = "/".join(sorted({auto["ran"] for auto, _, _ in launched}))
            forms = "/".join(sorted({"blocking" if mpi["algorithm"] == "baseline-blocking" else "polled"
                                     for _, mpi, _ in launched}))
            wrong = sum(w for _, _, w in launched)
            flags = []
            if ratio < 1.0:
                flags.append("SLOWER")
            if key != "all_reduce" and not abs(error) <= 25:
                flags.append("MODEL OFF")
            if wrong:
                flags.append("WRONG RESULTS")
            if flags:
                missed.append(f"{title} {n} ranks {size} B: {', '.join(flags)}")
            spread = "" if launches == 1 else f" [{min(ratios):.2f}-{max(ratios):.2f}]"
            print(f"{size:>10} {ran:>10} {auto_busbw:>8.3f} {mpi_busbw:>8.3f} {forms:>9} "
                  f"{ratio:>6.2f} {error:>+9.0f}%{spread}  {' '.join(flags)}")
print()
print("targets met" if not missed else f"targets missed at {len(missed)} rows:\n  " + "\n  ".join(missed))
PY
