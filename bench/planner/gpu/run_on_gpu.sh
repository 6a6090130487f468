#!/bin/bash
# Every measurement the planner's GPU presets take, in one run on a lent GPU (about 6 minutes on an H100):
# device facts, kernels (measure_kernels.py), the sustained matrix rate at the power limit
# (measure_sustained.py), whole layers (measure_layers.py) and whole training steps decomposed into
# kernels with the SM clock and power they ran at (measure_step.py, eager and under torch.compile).
# Results go to DIR (default $OUT, the device tool's return folder).
#     bash bench/planner/gpu/run_on_gpu.sh [DIR]
set -uo pipefail
out=${1:-${OUT:?give a result folder}}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/traces"
export PYTHONUNBUFFERED=1
{
    nvidia-smi --query-gpu=name,power.limit,power.max_limit,clocks.max.sm,clocks.max.mem,memory.total,driver_version \
        --format=csv
    python3 "$here/measure_kernels.py" --budget-s 200 --out "$out/kernels.json"
    python3 "$here/measure_sustained.py" --seconds 60 --out "$out/sustained.json"
    python3 "$here/measure_layers.py" --out "$out/layers.json"
    python3 "$here/measure_step.py" --out "$out/step.json" --trace-dir "$out/traces"
    python3 "$here/measure_step.py" --compile --out "$out/step-compiled.json" --trace-dir "$out/traces"
    tar -C "$out" -czf "$out/step-traces.tar.gz" traces && rm -r "$out/traces"
} 2>&1 | tee "$out/log.txt"
