"""Golden test: Strata against an independent PyTorch model (torch_gpt2.py, torch_llama.py, torch_moe.py).

Runs golden_dump for one backend, then recomputes everything it produced with
PyTorch from the same initial weights and the same token shard:
  - the first micro-batch's logits, loss and every parameter's gradient;
  - three optimizer steps (gradient accumulation over 2 micro-batches, global
    norm clipping that actually scales the gradients, AdamW, warmup + cosine
    LR): each step's loss, LR and gradient norm, and every parameter after
    the third step (read from Strata's checkpoint).
Every float is held to |strata - torch| <= atol + rtol * |torch| with
rtol 1e-4, atol 1e-5 (Strata computes in fp32). By default PyTorch computes in
float64, so the reference carries no fp32 rounding of its own
(--reference-dtype float32 compares fp32 with fp32; it passes too, with about
twice the error). golden_dump sets AdamW's eps to 1e-5: with eps 1e-8 an
element whose gradient is below ~1e-7 moves by about lr * gradient / eps,
which magnifies any fp32 rounding of that gradient beyond the tolerance, so
that even PyTorch fp32 against PyTorch fp64 fails.

The mixture-of-experts models' loss includes the router losses and is held to 1e-5 relative as well.

Usage: check_golden.py --dump-tool PATH --backend ref|cpu|opencl --work-dir DIR
                       [--model gpt2|llama|llama-tied|llama3|mixtral|qwen3_moe|qwen2_moe|olmoe]
"""

import argparse
import json
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2  # noqa: E402
import torch_llama  # noqa: E402
import torch_moe  # noqa: E402

RTOL = 1e-4
ATOL = 1e-5
MOE_LOSS_RTOL = 1e-5


class Comparison:
    """Accumulates per-tensor errors; groups them for the summary."""

    def __init__(self, verbose):
        self.verbose = verbose
        self.failures = []
        self.groups = {}  # group -> [max abs error, max rel error, worst error/allowed, tensors]

    def check(self, group, name, actual, expected):
        actual = torch.as_tensor(actual, dtype=torch.float64)
        expected = torch.as_tensor(expected, dtype=torch.float64)
        if actual.shape != expected.shape:
            self.failures.append(f"{name}: Strata shape {tuple(actual.shape)}, PyTorch {tuple(expected.shape)}")
            return
        if not torch.isfinite(actual).all():
            self.failures.append(f"{name}: Strata has non-finite values")
            return
        diff = (actual - expected).abs()
        allowed = ATOL + RTOL * expected.abs()
        ratio = diff / allowed
        worst = int(ratio.argmax())
        # Relative error only where it means something: above atol in size.
        sizable = expected.abs() > ATOL
        rel = (diff[sizable] / expected.abs()[sizable]).max().item() if sizable.any() else 0.0
        max_abs = diff.max().item()
        stats = self.groups.setdefault(group, [0.0, 0.0, 0.0, 0])
        stats[0] = max(stats[0], max_abs)
        stats[1] = max(stats[1], rel)
        stats[2] = max(stats[2], ratio.max().item())
        stats[3] += 1
        line = (f"{name}: max abs err {max_abs:.3e}, max rel err {rel:.3e} (where |torch| > atol), worst err/allowed "
                f"{ratio.max().item():.3f} at flat index {worst} (strata {actual.flatten()[worst].item():.9g}, "
                f"torch {expected.flatten()[worst].item():.9g})")
        mismatched = int((diff > allowed).sum())
        if mismatched:
            self.failures.append(f"{line}; {mismatched} of {diff.numel()} elements out of tolerance")
        elif self.verbose:
            print("  ok " + line)

    def fail(self, message):
        self.failures.append(message)

    def report(self):
        print(f"tolerance: |strata - torch| <= {ATOL:g} + {RTOL:g} * |torch|; "
              "rel err is taken where |torch| > atol; worst err/allowed <= 1 passes")
        for group, (max_abs, rel, worst, count) in self.groups.items():
            print(f"  {group:<26} {count:4d} tensors  max abs err {max_abs:.3e}  max rel err {rel:.3e}  "
                  f"worst err/allowed {worst:.3f}")
        for failure in self.failures:
            print("FAIL " + failure)
        return not self.failures


def reference_model(golden):
    """The independent PyTorch model of golden.json's family (torch_gpt2, torch_llama or torch_moe)."""
    family = golden["config"]["family"]
    if family in torch_moe.FLAVOURS:
        return torch_moe
    return torch_llama if family == "llama" else torch_gpt2


def first_micro_batch_reference(golden, cfg, dtype, fail):
    """Strata's first-micro-batch dump, and PyTorch's parameters (.grad filled),
    logits and loss for the same tokens; `fail` hears of mismatched tokens."""
    ref = reference_model(golden)
    dump = ref.read_safetensors(golden["first_micro_batch"])
    batch = golden["config"]["batch_size"]
    inputs, targets = ref.TokenWindows(golden["train_shards"], batch, cfg.block_size).next()
    if not torch.equal(inputs, dump["tokens"].long()) or not torch.equal(targets, dump["targets"].long()):
        fail("first micro-batch: Strata's tokens/targets differ from the window rule applied to the shard")
    params = ref.load_parameters(cfg, golden["initial_weights"], dtype)
    logits = ref.forward(params, cfg, inputs)
    loss = ref.loss_of(logits, targets)
    loss.backward()
    return dump, params, logits, loss


def reference_training(golden, cfg, dtype):
    """PyTorch's parameters, AdamW and micro-batch stream as golden's run starts."""
    ref = reference_model(golden)
    c = golden["config"]
    params = ref.load_parameters(cfg, golden["initial_weights"], dtype)
    optimizer = ref.make_adamw(params, c["lr"], (c["beta1"], c["beta2"]), c["adam_eps"], c["weight_decay"])
    windows = ref.TokenWindows(golden["train_shards"], c["batch_size"], cfg.block_size)
    return params, optimizer, windows


def check_first_micro_batch(golden, cfg, dtype, result):
    dump, params, logits, loss = first_micro_batch_reference(golden, cfg, dtype, result.fail)
    result.check("logits", "logits", dump["logits"], logits.detach())
    result.check("loss", "loss", dump["loss"], loss.detach())
    if golden["config"]["family"] in torch_moe.FLAVOURS:
        relative = abs(dump["loss"].double().item() - loss.item()) / abs(loss.item())
        router = logits.router_loss.item()
        print(f"  loss strata {dump['loss'].double().item():.9f} torch {loss.item():.9f} (router losses {router:.6g} "
              f"of it): relative error {relative:.2e}")
        if relative > MOE_LOSS_RTOL:
            result.fail(f"loss: relative error {relative:.2e} exceeds {MOE_LOSS_RTOL:g}")
    for name, tensor in params.items():
        result.check("gradients", "grad " + name, dump["grad." + name], tensor.grad)
    extra = sorted(k for k in dump if k.startswith("grad.") and k[5:] not in params)
    if extra:
        result.fail(f"first micro-batch: gradients of unknown parameters {extra}")


def check_training(golden, cfg, dtype, result):
    ref = reference_model(golden)
    c = golden["config"]
    params, optimizer, windows = reference_training(golden, cfg, dtype)
    if len(golden["steps"]) != c["steps"]:
        result.fail(f"Strata recorded {len(golden['steps'])} steps, expected {c['steps']}")
        return
    for step, strata_step in enumerate(golden["steps"]):
        lr = ref.lr_at(step, c["lr"], c["lr_min"], c["warmup_steps"], c["steps"])
        loss, norm = ref.train_step(params, cfg, optimizer, windows, c["accumulation_steps"], lr, c["grad_clip"])
        if norm <= c["grad_clip"]:
            result.fail(f"step {step + 1}: gradient norm {norm:.4f} does not exceed grad_clip {c['grad_clip']}, "
                        "so clipping is not exercised")
        result.check("step loss", f"step {step + 1} loss", strata_step["loss"], loss)
        result.check("step lr", f"step {step + 1} lr", strata_step["lr"], lr)
        result.check("step grad norm", f"step {step + 1} grad_norm", strata_step["grad_norm"], norm)
        print(f"  step {step + 1}: lr {lr:.6g}  loss strata {strata_step['loss']:.8f} torch {loss:.8f}  "
              f"grad norm strata {strata_step['grad_norm']:.6f} torch {norm:.6f} (clip {c['grad_clip']})")
    saved = {name: tensor for name, tensor in ref.read_checkpoint_tensors(golden["checkpoint"]).items()
             if not name.startswith("exp_avg")}
    if set(saved) != set(params):
        result.fail(f"checkpoint parameters differ: extra {sorted(set(saved) - set(params))}, "
                    f"missing {sorted(set(params) - set(saved))}")
    for name, tensor in params.items():
        if name in saved:
            result.check(f"params after {c['steps']} steps", name, saved[name], tensor.detach())


def run_golden_dump(dump_tool, backend, work_dir, precision="fp32", model="gpt2"):
    """Runs golden_dump; returns its golden.json and the reference model's Config."""
    subprocess.run([dump_tool, backend, work_dir, precision, model], check=True)
    with open(os.path.join(work_dir, "golden.json")) as f:
        golden = json.load(f)
    return golden, reference_model(golden).Config.from_golden(golden["config"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump-tool", required=True, help="the golden_dump executable")
    parser.add_argument("--backend", required=True, choices=["ref", "cpu", "opencl"])
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--model", default="gpt2", help="golden_dump's model: gpt2, llama, llama-tied, llama3, mixtral, qwen3_moe, qwen2_moe, olmoe")
    parser.add_argument("--reference-dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--verbose", action="store_true", help="print every tensor's errors")
    args = parser.parse_args()

    golden, cfg = run_golden_dump(args.dump_tool, args.backend, args.work_dir, model=args.model)
    dtype = getattr(torch, args.reference_dtype)
    torch.manual_seed(0)
    print(f"golden check: {args.model} on backend '{args.backend}' against PyTorch {torch.__version__} in {args.reference_dtype}")

    result = Comparison(args.verbose)
    check_first_micro_batch(golden, cfg, dtype, result)
    check_training(golden, cfg, dtype, result)
    ok = result.report()
    print("golden check " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
