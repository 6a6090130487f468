#!/usr/bin/env python3
"""Sustained matrix throughput on one GPU: short kernel measurements (measure_kernels.py) run at the boost
clock, training runs for hours at whatever clock the power limit allows. This runs the GEMMs of a large
transformer layer back to back for --seconds and records throughput, SM clock and power in windows, so the
planner can hold GEMMs to the rate the card sustains (the preset's sustained_matrix_tflops).

    python3 measure_sustained.py --out FILE.json [--seconds 90]

Only torch and the standard library; --smoke runs a few windows on the CPU to test the script."""

import argparse
import json
import time

import torch

from gpu_clocks import smi


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--window", type=float, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    # A 70B-class layer (hidden 8192, MLP 4x) over 8192 tokens: the four GEMMs forward.
    tokens, hidden = (256, 128) if args.smoke else (8192, 8192)
    shapes = [(tokens, 3 * hidden, hidden), (tokens, hidden, hidden), (tokens, 4 * hidden, hidden), (tokens, hidden, 4 * hidden)]
    operands = [(torch.randn(m, k, device=device, dtype=dtype), torch.randn(n, k, device=device, dtype=dtype),
                 torch.empty(m, n, device=device, dtype=dtype)) for m, n, k in shapes]
    flops_per_round = sum(2 * m * n * k for m, n, k in shapes)

    def one_round():
        for a, b, c in operands:
            torch.matmul(a, b.t(), out=c)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        one_round()
    sync()
    windows = []
    start = time.perf_counter()
    seconds = 6 if args.smoke else args.seconds
    while time.perf_counter() - start < seconds:
        begin = time.perf_counter()
        rounds = 0
        while time.perf_counter() - begin < (0.5 if args.smoke else args.window):
            for _ in range(10):
                one_round()
            rounds += 10
            sync()
        elapsed = time.perf_counter() - begin
        windows.append({"t_s": round(begin - start, 2), "tflops": rounds * flops_per_round / elapsed / 1e12,
                        **(smi() if device.type == "cuda" else {})})
        print(windows[-1], flush=True)
    first = max(w["tflops"] for w in windows[:2])  # the boost clock, before the power limit bites
    tail = [w["tflops"] for w in windows if w["t_s"] >= 0.66 * seconds] or [windows[-1]["tflops"]]
    result = {"schema": "strata-gpu-sustained-1",
              "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "shapes": shapes, "dtype": str(dtype), "seconds": seconds, "windows": windows,
              "burst_tflops": first, "sustained_tflops": sum(tail) / len(tail),
              "sustained_over_burst": sum(tail) / len(tail) / first}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"burst {first:.1f} TFLOP/s, sustained (last third) {result['sustained_tflops']:.1f}: "
          f"ratio {result['sustained_over_burst']:.3f}")


if __name__ == "__main__":
    main()
