#!/usr/bin/python3
"""The planner's prediction of one transformer layer's forward and backward against the layer timed in
eager PyTorch on the GPU (measure_layers.py). The prediction is the compute term of a 2-layer model minus
that of a 1-layer model (same shapes, bf16, no recomputation, one device's work of a data-parallel plan),
so embedding, head and optimizer cancel.

    compare_layers.py [MEASUREMENTS.json] [CLUSTER]   (defaults: measurements/h200-layers.json, dgx-h200)
Python 3 standard library only; STRATA=path overrides build/bin/strata.
"""
import json
import os
import sys
import tempfile

from plan_one_device import HERE, REPO, plan_one_device


def compute_seconds(layer, n_layer, cluster, work):
    plan = plan_one_device(work, layer["family"], n_layer, layer["heads"], layer["kv_heads"], layer["hidden"],
                           layer["ffn"], 128, layer["seq"], layer["micro_batch"], cluster)
    return plan["plans"][0]["time_s"]["compute"]


def main():
    measurements = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "measurements", "h200-layers.json")
    cluster = sys.argv[2] if len(sys.argv) > 2 else os.path.join(REPO, "configs", "clusters", "dgx-h200.toml")
    layers = json.load(open(measurements))["layers"]
    errors = []
    print(f"{'layer':<44} {'measured ms':>11} {'predicted ms':>12} {'error':>7}")
    with tempfile.TemporaryDirectory() as work:
        for layer in layers:
            predicted = compute_seconds(layer, 2, cluster, work) - compute_seconds(layer, 1, cluster, work)
            measured = layer["forward_backward_s"]
            errors.append(predicted / measured - 1)
            name = (f"{layer['family']} h={layer['hidden']} heads={layer['heads']}/{layer['kv_heads']} "
                    f"s={layer['seq']} b={layer['micro_batch']}")
            print(f"{name:<44} {1e3 * measured:>11.2f} {1e3 * predicted:>12.2f} {100 * errors[-1]:>+6.1f}%")
    print(f"mean |error| {100 * sum(abs(e) for e in errors) / len(errors):.1f}% over {len(errors)} layers")


if __name__ == "__main__":
    main()
