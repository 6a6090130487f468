"""The throughput benchmark's Debian PyTorch 1.13 column for the mixture-of-experts models: trains the
golden tests' independent Mixtral (tests/golden/torch_moe.py: functional, experts looped as
transformers' MixtralSparseMoeBlock loops them, the load-balancing loss) with their AdamW and
clipping, and prints one JSON line: the median tokens/s after the warm-up steps. torch.compile,
scaled_dot_product_attention and nn.RMSNorm do not exist in 1.13, so this is the eager code of that
release, as torch_gpt2.py is for GPT-2.

Usage: /usr/bin/python3 bench/torch_golden_moe.py --config configs/bench/NAME.toml --steps S --warmup W
       --threads N [--precision fp32|bf16]
"""

import argparse
import json
import os
import statistics
import sys
import time
import tomllib

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "golden"))
import torch_moe  # noqa: E402
from torch_gpt2 import AUTOCAST_DTYPES, TokenWindows, corpus_train_shards, loaded_blas  # noqa: E402


def golden_config(model):
    """torch_moe's Config from a config file's [model] (Strata's keys, their defaults where unset)."""
    return torch_moe.Config({**model, "n_kv_head": model.get("n_kv_head"), "head_dim": model.get("head_dim"),
                             "intermediate_size": model.get("intermediate_size", 0),
                             "layer_norm_eps": model.get("layer_norm_eps", 1e-5),
                             "rope_theta": model.get("rope_theta", 1e6), "rope_scaling": {"type": "none"},
                             "tie_word_embeddings": model.get("tie_word_embeddings", False),
                             "attention_bias": False, "mlp_bias": False})


def init_parameters(cfg, seed):
    """Norm weights one, every matrix normal(0, 0.02) (transformers' initializer_range)."""
    generator = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in torch_moe.parameter_shapes(cfg).items():
        tensor = torch.ones(shape) if len(shape) == 1 else torch.empty(shape).normal_(0.0, 0.02, generator=generator)
        params[name] = tensor.requires_grad_()
    return params


def main(argv):
    parser = argparse.ArgumentParser(description="Train the golden PyTorch Mixtral under Debian's torch; tokens/s")
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--precision", choices=sorted(AUTOCAST_DTYPES), default="fp32")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args(argv)

    with open(args.config, "rb") as f:
        config = tomllib.load(f)
    train = config["train"]
    torch.set_num_threads(args.threads)
    cfg = golden_config(config["model"])
    params = init_parameters(cfg, args.seed)
    optimizer = torch_moe.make_adamw(params, train.get("lr", 3e-4), (0.9, 0.95), 1e-8, train.get("weight_decay", 0.1))
    windows = TokenWindows(corpus_train_shards(os.path.join(REPO, config["data"]["dir"])), train["batch_size"],
                           cfg.block_size)
    rates = []
    for step in range(args.steps):
        start = time.perf_counter()
        loss, _ = torch_moe.train_step(params, cfg, optimizer, windows, 1, train.get("lr", 3e-4), 1.0,
                                       AUTOCAST_DTYPES[args.precision])
        rates.append(train["batch_size"] * cfg.block_size / (time.perf_counter() - start))
        print(f"step {step + 1}: loss {loss:.4f}, {rates[-1]:.0f} tokens/s", file=sys.stderr, flush=True)
    measured = rates[args.warmup:] if len(rates) > args.warmup else rates
    print(json.dumps({"tokens_per_s": statistics.median(measured), "steps": rates, "threads": torch.get_num_threads(),
                      "torch": torch.__version__, "precision": args.precision, "blas": loaded_blas()}))


if __name__ == "__main__":
    main(sys.argv[1:])
