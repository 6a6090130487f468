#!/usr/bin/env bash
# The speed check of the comm layer: 2 ranks, all_reduce of f32 from 4 KiB to
# 256 MiB, Strata's `auto` against the MPI library's MPI_Allreduce in the same
# run (interleaved), with the machine's memcpy bandwidth as the ceiling and the
# cost model's prediction error. Target: auto within 10% of MPI or faster at
# every size, faster from 1 MiB up.
#
# Usage: bench/comm/run_allreduce_vs_mpi.sh [EXECUTABLE [--calibrate] [comm-bench options...]]
#   EXECUTABLE: `strata` or `strata-comm` (default: build/bin/strata, else build/bin/strata-comm)
# `auto` chooses with the cost model and a fresh link probe. With --calibrate
# as the first option, a calibration run over every one-node all_reduce
# algorithm comes first and stores fitted scales in the probe cache (on a
# quiet, stable machine that sharpens the choices; on a shared one it fits the
# moment it ran in). Both sides run with the same allocator setting: glibc
# otherwise returns big blocks to the kernel on free, and first touches of
# fresh memory are slow here.
set -euo pipefail
cd "$(dirname "$0")/../.."
exe=${1:-}
if [[ -z "$exe" ]]; then
  exe=build/bin/strata
  [[ -x "$exe" ]] || exe=build/bin/strata-comm
fi
shift || true
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736
json=$(mktemp --suffix=.json)
trap 'rm -f "$json"' EXIT
if [[ "${1:-}" == "--calibrate" ]]; then
  shift
  echo "# calibration run"
  STRATA_COMM_REPROBE=1 mpirun --allow-run-as-root -np 2 -x GLIBC_TUNABLES -x STRATA_COMM_REPROBE "$exe" comm-bench \
    -o all_reduce -d f32 -b 4K -e 256M -f 2 -n 3 --rounds 5 \
    -a ring,rhd,recursive_doubling,binomial,shm,direct --calibrate
else
  # A fresh probe (its cache entry, and any calibration stored there, is replaced).
  STRATA_COMM_REPROBE=1 mpirun --allow-run-as-root -np 2 -x STRATA_COMM_REPROBE "$exe" topo > /dev/null
fi
echo "# measurement"
mpirun --allow-run-as-root -np 2 -x GLIBC_TUNABLES "$exe" comm-bench -o all_reduce -d f32 -b 4K -e 256M -f 2 \
  -a auto,baseline --json "$json" "$@"
/usr/bin/python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
rows = {}
for row in report["rows"]:
    rows.setdefault(row["bytes"], {})[row["algorithm"]] = row
print()
print(f"memcpy bandwidth (ceiling): {report['memcpy_GBps']:.2f} GB/s")
print(f"{'size':>10} {'auto':>22} {'busbw auto':>11} {'busbw MPI':>10} {'auto/MPI':>9} {'model err':>10}  verdict")
met = True
for size in sorted(rows):
    auto, mpi = rows[size]["auto"], rows[size]["baseline"]
    ratio = auto["busbw_GBps"] / mpi["busbw_GBps"]
    error = (auto["predicted_us"] - auto["time_us"]) / auto["time_us"] * 100 if auto["predicted_us"] else float("nan")
    if size >= 1 << 20:
        verdict = "faster" if ratio > 1.0 else "NOT FASTER"
        met &= ratio > 1.0
    else:
        verdict = "faster" if ratio > 1.0 else ("within 10%" if ratio >= 0.9 else "SLOWER")
        met &= ratio >= 0.9
    wrong = auto["wrong"] + mpi["wrong"]
    print(f"{size:>10} {auto['ran']:>22} {auto['busbw_GBps']:>11.3f} {mpi['busbw_GBps']:>10.3f} {ratio:>9.2f} "
          f"{error:>+9.0f}%  {verdict}{'  WRONG RESULTS' if wrong else ''}")
print("target met" if met else "target missed")
PY
