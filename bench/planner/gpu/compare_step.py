#!/usr/bin/python3
"""The planner's prediction of one whole training step on one GPU against the step measured in eager PyTorch
(measure_step.py), class by class: GEMMs, attention, the memory-bound and element-wise rest, the optimizer,
and the time the GPU sat idle between kernels. The prediction is `strata plan --explain` for the same model,
micro-batch and dtype as one device of a data-parallel plan without ZeRO or recomputation, described as the
measured run ran (eager PyTorch: `--eager on --loss eager-f32`); its data-parallel terms (the exposed
reduction and the slowdown beside it) are left out, since the measured step ran alone.

    compare_step.py [MEASUREMENTS.json] [CLUSTER]   (defaults: measurements/h100-step.json, dgx-h100)
Python 3 standard library only; STRATA=path overrides build/bin/strata.
"""
import json
import os
import sys
import tempfile

from plan_one_device import HERE, REPO, plan_one_device

# Measured kernel classes (measure_step.py) beside the planner's terms (`strata plan --explain`).
MEASURED = {
    "GEMMs": ("gemm",),
    "attention": ("attention",),
    "memory-bound": ("copy_cast", "cross_entropy", "elementwise", "norm", "reduction", "embedding", "other"),
    "optimizer": ("optimizer",),
}
PREDICTED = {
    "GEMMs": ("compute: GEMMs",),
    "attention": ("compute: attention",),
    "memory-bound": ("compute: memory-bound and element-wise ops", "gradient accumulation"),
    "optimizer": ("optimizer",),
}


def predicted_terms(step, cluster, work):
    plan = plan_one_device(work, step["family"], step["n_layer"], step["heads"], step["kv_heads"], step["hidden"],
                           step["ffn"], step["vocab"], step["seq"], step["micro_batch"], cluster,
                           ("--eager", "on", "--loss", "eager-f32", "--explain"))
    terms = {t["name"]: t["seconds"] for t in plan["explain"]["winner"]["terms"]}
    return {cls: sum(terms.get(name, 0.0) for name in names) for cls, names in PREDICTED.items()}


def main():
    measurements = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "measurements", "h100-step.json")
    cluster = sys.argv[2] if len(sys.argv) > 2 else os.path.join(REPO, "configs", "clusters", "dgx-h100.toml")
    steps = json.load(open(measurements))["steps"]
    print(f"{'step, ms':<30} " + " ".join(f"{c:>20}" for c in (*MEASURED, "idle", "whole step")))
    with tempfile.TemporaryDirectory() as work:
        for step in steps:
            profile = step["profile"]
            measured = {c: sum(profile["classes_s"].get(k, 0.0) for k in kinds) for c, kinds in MEASURED.items()}
            # The profiled steps' kernels, scaled to the timed steps' length (the profiler adds a little).
            scale = step["step_s"] / profile["span_s"]
            measured = {c: t * scale for c, t in measured.items()}
            measured["idle"] = profile["idle_s"] * scale
            predicted = predicted_terms(step, cluster, work)
            predicted["idle"] = 0.0  # launch gaps are inside the kernel terms (the preset's op_overhead_us)
            measured["whole step"], predicted["whole step"] = step["step_s"], sum(predicted.values())
            cells = []
            for c in measured:
                priced = measured[c] > 0 and predicted[c] > 0  # idle time has no term of its own
                error = f"{100 * (predicted[c] / measured[c] - 1):+.0f}%" if priced else "-"
                cells.append(f"{1e3 * measured[c]:>6.1f}/{1e3 * predicted[c]:>6.1f} {error:>6}")
            name = f"{step['name']} s={step['seq']} b={step['micro_batch']}"
            print(f"{name:<30} " + " ".join(f"{cell:>20}" for cell in cells))
    print("cells: measured / predicted ms and the prediction's error")


if __name__ == "__main__":
    main()
