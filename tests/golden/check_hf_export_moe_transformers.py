"""`strata export --hf` of a mixture of experts loaded by transformers itself.

golden_dump trains the golden MoE model (cpu, fp32) and saves a checkpoint; `strata export --hf` writes it
with a shard limit that forces several shards, the experts one tensor each as the Hub stores them.
transformers' AutoModelForCausalLM (MixtralForCausalLM, Qwen2MoeForCausalLM, OlmoeForCausalLM,
Qwen3MoeForCausalLM) loads the directory, and on the run's first training batch must give
  - the logits of the independent PyTorch model (torch_moe.py, which the golden_torch_* tests hold to
    Strata's own to 1e-5 relative) on the checkpoint's tensors under golden_dump's config, and
  - its load-balancing loss (transformers' `aux_loss` with output_router_logits) equal to torch_moe's;
and every expert tensor must have been used (transformers reports none missing or unexpected).
transformers comes from PyPI in a venv over Debian's python3-torch (hf_venv.py); skipped (exit 77) when the
venv cannot be made or the version there has no class for the architecture (Qwen3-MoE needs 4.51).

Usage: check_hf_export_moe_transformers.py --strata PATH --dump-tool PATH --work-dir DIR --model FAMILY [--venv DIR]
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_venv  # noqa: E402

TRANSFORMERS = "transformers==4.46.3"  # as check_hf_export_transformers.py: the last to run on torch 1.13
DEFAULT_VENV = "/var/tmp/strata-test-transformers"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strata", required=True)
    parser.add_argument("--dump-tool", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--model", required=True, help="mixtral, qwen2_moe, olmoe or qwen3_moe")
    parser.add_argument("--venv", default=DEFAULT_VENV)
    args = parser.parse_args()
    hf_venv.reexec_in_venv(args.venv, [TRANSFORMERS], "import torch, transformers", system_site_packages=True)
    import torch
    import transformers
    import torch_moe

    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    subprocess.run([args.dump_tool, "cpu", args.work_dir, "fp32", args.model], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(args.work_dir, "golden.json")) as f:
        golden = json.load(f)
    out = os.path.join(args.work_dir, "hf")
    subprocess.run([args.strata, "export", golden["checkpoint"], "--hf", out, "--max-shard-mb", "0.1"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "config.json")) as f:
        architecture = json.load(f)["architectures"][0]
    if not hasattr(transformers, architecture):
        print(f"SKIPPED: transformers {transformers.__version__} has no {architecture}", flush=True)
        return hf_venv.SKIP_RETURN_CODE

    model, info = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32,
                                                                    output_loading_info=True)
    failures = [f"{kind}: {names}" for kind, names in info.items() if names]
    model.eval()
    cfg = torch_moe.Config.from_golden(golden["config"])
    saved = torch_moe.read_checkpoint_tensors(golden["checkpoint"])
    inputs, targets = torch_moe.TokenWindows(golden["train_shards"], 2, cfg.block_size).next()
    with torch.no_grad():
        expected = torch_moe.forward(saved, cfg, inputs.long())
        got = model(inputs.long(), output_router_logits=True)
    worst = (got.logits - expected).abs().max().item()
    scale = expected.abs().max().item()
    if not worst <= 1e-5 * scale:
        failures.append(f"logits differ by {worst} (largest |logit| {scale})")
    # The router losses torch_moe attached (aux_coef balance + z_coef z) against transformers' aux_loss and
    # the z-loss of transformers' router logits (transformers has no z-loss of its own).
    z_loss = torch_moe.router_z_loss(list(got.router_logits)).item()
    hf_router = cfg.router_aux_loss_coef * got.aux_loss.item() + cfg.router_z_loss_coef * z_loss
    if not math.isclose(hf_router, expected.router_loss.item(), rel_tol=1e-5, abs_tol=1e-9):
        failures.append(f"router loss {hf_router} (aux_loss {got.aux_loss.item()}), torch_moe's "
                        f"{expected.router_loss.item()}")
    print(f"{architecture} from the export: logits within {worst:.2e} of {scale:.3f}; weighted aux loss "
          f"{hf_router:.6f} (torch_moe {expected.router_loss.item():.6f}); transformers {transformers.__version__}")
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
