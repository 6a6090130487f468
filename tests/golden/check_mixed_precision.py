"""Golden test for mixed precision: Strata trained in bf16 or fp16 against the
fp32 PyTorch reference (torch_gpt2.py or torch_llama.py in float32, no autocast).

golden_dump builds and trains the model as the Trainer does in that precision
(autocast casts, default fusion on, f32 master weights and AdamW state; fp16
with dynamic loss scaling from 65536). From the same initial weights and the
same token shard, PyTorch recomputes:
  - the first micro-batch's gradients: the cosine similarity of Strata's and
    PyTorch's gradient must be >= 0.99 for every parameter tensor;
  - the loss of every optimizer step (gradient accumulation, clipping, AdamW,
    warmup + cosine LR): |strata - torch| / torch <= 2% at every step. A step
    Strata skipped for overflow is skipped by the reference too (its
    micro-batches consumed, no update), so the curves stay aligned.
Also checked: Strata's logits are bf16/fp16 (the LM head ran in the requested
precision) and fp16's first step ran at the configured initial loss scale.
The worst relative loss difference and the worst cosine are printed.

Usage: check_mixed_precision.py --dump-tool PATH --backend ref|cpu --precision bf16|fp16 --work-dir DIR [--model M]
"""

import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_golden  # noqa: E402

LOSS_RTOL = 0.02
MIN_COSINE = 0.99

# What the LM head's matmul (an autocast op) must have produced: evidence that
# Strata really computed in the requested precision.
LOGITS_DTYPE = {"bf16": "BF16", "fp16": "F16"}


def gradient_cosines(golden, cfg, failures):
    """name -> cosine of Strata's first-micro-batch gradient with fp32 PyTorch's."""
    dump, params, _, loss = check_golden.first_micro_batch_reference(golden, cfg, torch.float32, failures.append)
    strata_loss = dump["loss"].item()
    print(f"first micro-batch loss: strata {strata_loss:.6f} torch {loss.item():.6f} "
          f"(rel diff {abs(strata_loss - loss.item()) / loss.item():.2e})")
    cosines = {}
    for name, tensor in params.items():
        strata_grad = dump["grad." + name].double().flatten()
        torch_grad = tensor.grad.double().flatten()
        if not torch.isfinite(strata_grad).all():
            failures.append(f"grad {name}: Strata has non-finite values")
            continue
        cosines[name] = F.cosine_similarity(strata_grad, torch_grad, dim=0).item()
    return cosines


def loss_curve(golden, cfg):
    """Per step: (Strata's loss, PyTorch fp32's loss, Strata's step record)."""
    c = golden["config"]
    ref = check_golden.reference_model(golden)
    params, optimizer, windows = check_golden.reference_training(golden, cfg, torch.float32)
    curve = []
    for step, strata_step in enumerate(golden["steps"]):
        lr = ref.lr_at(step, c["lr"], c["lr_min"], c["warmup_steps"], c["steps"])
        loss, _ = ref.train_step(params, cfg, optimizer, windows, c["accumulation_steps"], lr, c["grad_clip"],
                                 apply=not strata_step["skipped"])
        curve.append((strata_step["loss"], loss, strata_step))
    return curve


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump-tool", required=True, help="the golden_dump executable")
    parser.add_argument("--backend", required=True, choices=["ref", "cpu"])
    parser.add_argument("--precision", required=True, choices=["bf16", "fp16"])
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--model", default="gpt2",
                        help="golden_dump's model: gpt2, llama, llama-tied, llama3, mixtral, qwen3_moe, qwen2_moe, olmoe")
    args = parser.parse_args()

    golden, cfg = check_golden.run_golden_dump(args.dump_tool, args.backend, args.work_dir, args.precision, args.model)
    ref = check_golden.reference_model(golden)
    torch.manual_seed(0)
    print(f"mixed-precision check: {args.model} on backend '{args.backend}' in {args.precision} against PyTorch "
          f"{torch.__version__} in float32")
    failures = []
    logits_dtype = ref.safetensors_dtypes(golden["first_micro_batch"])["logits"]
    if logits_dtype != LOGITS_DTYPE[args.precision]:
        failures.append(f"Strata's logits are {logits_dtype}, not {LOGITS_DTYPE[args.precision]}: "
                        f"the model did not compute in {args.precision}")
    initial_scale = golden["config"]["loss_scale"] if args.precision == "fp16" else 1.0

    cosines = gradient_cosines(golden, cfg, failures)
    for name, cosine in cosines.items():
        if not cosine >= MIN_COSINE:
            failures.append(f"grad {name}: cosine similarity {cosine:.6f} < {MIN_COSINE}")

    curve = loss_curve(golden, cfg)
    if len(curve) != golden["config"]["steps"]:
        failures.append(f"Strata recorded {len(curve)} steps, expected {golden['config']['steps']}")
    worst_rel, worst_step = 0.0, 0
    for step, (strata_loss, torch_loss, record) in enumerate(curve, start=1):
        rel = abs(strata_loss - torch_loss) / abs(torch_loss) if math.isfinite(strata_loss) else math.inf
        if not rel <= LOSS_RTOL:
            failures.append(f"step {step}: loss strata {strata_loss:.6f} torch {torch_loss:.6f}, "
                            f"relative difference {rel:.4f} > {LOSS_RTOL}")
        if step == 1 and record["loss_scale"] != initial_scale:
            failures.append(f"step 1: loss scale {record['loss_scale']:g}, expected {initial_scale:g}")
        if rel >= worst_rel:
            worst_rel, worst_step = rel, step
        print(f"  step {step:2d}: lr {record['lr']:.6g}  loss strata {strata_loss:.6f} torch {torch_loss:.6f}  "
              f"rel diff {rel:.2e}  loss scale {record['loss_scale']:g}{'  SKIPPED (overflow)' if record['skipped'] else ''}")

    skipped = sum(1 for record in golden["steps"] if record["skipped"])
    print(f"steps skipped for overflow: {skipped} of {len(curve)}")
    print(f"worst per-step relative loss difference: {worst_rel:.3e} at step {worst_step} (bound {LOSS_RTOL})")
    if cosines:
        worst_name = min(cosines, key=cosines.get)
        print(f"worst gradient cosine similarity at step 0: {cosines[worst_name]:.7f} ({worst_name}; "
              f"bound {MIN_COSINE}, {len(cosines)} tensors)")
    for failure in failures:
        print("FAIL " + failure)
    print(f"mixed-precision check {args.precision} on '{args.backend}' " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
