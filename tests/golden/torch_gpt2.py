"""An independent PyTorch GPT-2, the reference Strata is checked against.

Written from the model's definition, not from Strata's code: learned position
embeddings, pre-LayerNorm blocks (eps 1e-5), causal self-attention, a tanh-GELU
MLP of 4x width, and an LM head tied to the token embedding, with HuggingFace
GPT-2 parameter names and Conv1D layouts (weights stored [in, out]). Also here:
a safetensors reader, an llm.c token-shard reader, the contiguous-window batch
rule, the LR schedule and AdamW parameter groups.

Run as a script it trains for throughput measurement (bench/train_throughput.py),
in fp32 or with bf16 autocast around forward and loss (fp32 master weights):
    /usr/bin/python3 torch_gpt2.py --n-layer 6 --n-head 6 --n-embd 384 --vocab-size 50257 \
        --seq 256 --batch 8 --steps 8 --data data/kjv --threads 2 [--precision bf16]
"""

import argparse
import contextlib
import ctypes
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

# ---------------------------------------------------------------- file formats

_SAFETENSORS_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
}


def _read_safetensors_file(path):
    """(header, data). Format: u64 LE header length N, N bytes of JSON
    ({name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}),
    then the data buffer the offsets index."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise ValueError(f"{path}: header length {header_len} runs past the end of the file")
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    return header, memoryview(blob)[8 + header_len:]


def safetensors_dtypes(path):
    """name -> the dtype stored in the file ("F32", "BF16", ...)."""
    header, _ = _read_safetensors_file(path)
    return {name: entry["dtype"] for name, entry in header.items() if name != "__metadata__"}


def read_safetensors(path):
    """name -> torch tensor (BF16 widened to float32)."""
    header, data = _read_safetensors_file(path)
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        shape = entry["shape"]
        dtype = entry["dtype"]
        if dtype == "BF16":  # numpy has no bfloat16: widen the raw 16 bits
            raw = np.frombuffer(data[begin:end], dtype=np.uint16).astype(np.uint32) << 16
            array = raw.view(np.float32)
        else:
            array = np.frombuffer(data[begin:end], dtype=_SAFETENSORS_DTYPES[dtype])
        if array.size != math.prod(shape):
            raise ValueError(f"{path}: tensor '{name}' holds {array.size} values, shape {shape} needs {math.prod(shape)}")
        tensors[name] = torch.from_numpy(array.reshape(shape).copy())
    return tensors


def read_checkpoint_tensors(checkpoint_dir):
    """Every global tensor of a Strata checkpoint directory, assembled from the pieces its
    checkpoint.json indexes ("tensors": name -> shape, dtype and pieces, each a box of the tensor
    stored under its key in one of the directory's safetensors files)."""
    with open(os.path.join(checkpoint_dir, "checkpoint.json")) as f:
        manifest = json.load(f)
    files = {}
    tensors = {}
    for name, entry in manifest["tensors"].items():
        whole = torch.empty(entry["shape"], dtype=torch.float32)
        for piece in entry["pieces"]:
            if piece["file"] not in files:
                files[piece["file"]] = read_safetensors(os.path.join(checkpoint_dir, piece["file"]))
            box = tuple(slice(o, o + n) for o, n in zip(piece["offsets"], piece["lengths"]))
            whole[box] = files[piece["file"]][piece["key"]]
        tensors[name] = whole
    return tensors


SHARD_MAGIC = 20240520
SHARD_HEADER_INTS = 256


def read_token_shard(path):
    """llm.c shard: 256 little-endian int32 (magic 20240520, version 1 = uint16
    tokens or 2 = uint32 tokens, token count, zeros), then the tokens."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(SHARD_HEADER_INTS * 4), dtype="<i4")
        if header.size != SHARD_HEADER_INTS or header[0] != SHARD_MAGIC:
            raise ValueError(f"{path}: not an llm.c token shard (magic {header[0] if header.size else None})")
        version, count = int(header[1]), int(header[2])
        if version not in (1, 2):
            raise ValueError(f"{path}: unsupported shard version {version}")
        tokens = np.frombuffer(f.read(), dtype="<u2" if version == 1 else "<u4")
    if tokens.size != count:
        raise ValueError(f"{path}: header says {count} tokens, body holds {tokens.size}")
    return tokens.astype(np.int64)


class TokenWindows:
    """Micro-batches of B rows by T columns taken in order: at offset p the
    inputs are tokens[p, p+B*T) and the targets tokens[p+1, p+B*T+1), then
    p += B*T; when a window would run past the shard's end the next shard
    starts at 0 (the last wraps to the first)."""

    def __init__(self, shard_paths, batch, seq):
        self.shards = [read_token_shard(p) for p in shard_paths]
        self.batch, self.seq = batch, seq
        self.shard, self.offset = 0, 0

    def next(self):
        window = self.batch * self.seq
        if self.offset + window + 1 > self.shards[self.shard].size:
            self.shard = (self.shard + 1) % len(self.shards)
            self.offset = 0
        tokens = self.shards[self.shard][self.offset:self.offset + window + 1]
        self.offset += window
        inputs = torch.from_numpy(tokens[:-1].reshape(self.batch, self.seq).copy())
        targets = torch.from_numpy(tokens[1:].reshape(self.batch, self.seq).copy())
        return inputs, targets


# ----------------------------------------------------------------------- model

class Config:
    def __init__(self, n_layer, n_head, n_embd, vocab_size, block_size, layer_norm_eps=1e-5):
        self.n_layer, self.n_head, self.n_embd = n_layer, n_head, n_embd
        self.vocab_size, self.block_size, self.layer_norm_eps = vocab_size, block_size, layer_norm_eps

    @classmethod
    def from_golden(cls, c):
        """From golden.json's config (Strata's model.* keys)."""
        return cls(c["n_layer"], c["n_head"], c["n_embd"], c["vocab_size"], c["block_size"], c["layer_norm_eps"])

    @classmethod
    def from_hf(cls, c):
        """From GPT2LMHeadModel's config.json (block_size: the position table's rows)."""
        return cls(c["n_layer"], c["n_head"], c["n_embd"], c["vocab_size"], c["n_positions"], c["layer_norm_epsilon"])


def parameter_shapes(cfg):
    """HuggingFace GPT2LMHeadModel names (lm_head tied to wte, not listed)."""
    c = cfg.n_embd
    shapes = {"transformer.wte.weight": (cfg.vocab_size, c), "transformer.wpe.weight": (cfg.block_size, c)}
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        shapes.update({
            p + "ln_1.weight": (c,), p + "ln_1.bias": (c,),
            p + "attn.c_attn.weight": (c, 3 * c), p + "attn.c_attn.bias": (3 * c,),
            p + "attn.c_proj.weight": (c, c), p + "attn.c_proj.bias": (c,),
            p + "ln_2.weight": (c,), p + "ln_2.bias": (c,),
            p + "mlp.c_fc.weight": (c, 4 * c), p + "mlp.c_fc.bias": (4 * c,),
            p + "mlp.c_proj.weight": (4 * c, c), p + "mlp.c_proj.bias": (c,),
        })
    shapes.update({"transformer.ln_f.weight": (c,), "transformer.ln_f.bias": (c,)})
    return shapes


def init_parameters(cfg, seed, dtype=torch.float32):
    """GPT-2 initialisation: normal(0, 0.02); residual projections 0.02/sqrt(2L)."""
    generator = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in parameter_shapes(cfg).items():
        if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
            tensor = torch.ones(shape, dtype=dtype)
        elif name.endswith(".bias"):
            tensor = torch.zeros(shape, dtype=dtype)
        else:
            std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("c_proj.weight") else 0.02
            tensor = torch.empty(shape, dtype=dtype).normal_(0.0, std, generator=generator)
        params[name] = tensor.requires_grad_()
    return params


def load_parameters(cfg, path, dtype, shapes=None):
    """Leaf tensors (requiring grad) from a safetensors file, shapes checked against `shapes`
    (name -> shape; default GPT-2's)."""
    stored = read_safetensors(path)
    params = {}
    for name, shape in (shapes or parameter_shapes(cfg)).items():
        if name not in stored:
            raise KeyError(f"{path}: tensor '{name}' is missing")
        if tuple(stored[name].shape) != shape:
            raise ValueError(f"{path}: '{name}' has shape {tuple(stored[name].shape)}, expected {shape}")
        params[name] = stored[name].to(dtype).clone().requires_grad_()
    return params


def _conv1d(x, weight, bias):
    """HuggingFace Conv1D: y = x @ W + b with W stored [in, out]."""
    out = torch.addmm(bias, x.reshape(-1, x.shape[-1]), weight)
    return out.view(*x.shape[:-1], weight.shape[1])


def forward(params, cfg, tokens):
    """Logits [B, T, V] for int64 tokens [B, T]."""
    batch, seq = tokens.shape
    c, heads = cfg.n_embd, cfg.n_head
    head_size = c // heads
    eps = cfg.layer_norm_eps
    positions = torch.arange(seq)
    x = F.embedding(tokens, params["transformer.wte.weight"]) + F.embedding(positions, params["transformer.wpe.weight"])
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (c,), params[p + "ln_1.weight"], params[p + "ln_1.bias"], eps)
        q, k, v = _conv1d(h, params[p + "attn.c_attn.weight"], params[p + "attn.c_attn.bias"]).split(c, dim=2)
        q, k, v = (t.view(batch, seq, heads, head_size).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_size))
        weights = F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        attended = (weights @ v).transpose(1, 2).reshape(batch, seq, c)
        x = x + _conv1d(attended, params[p + "attn.c_proj.weight"], params[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (c,), params[p + "ln_2.weight"], params[p + "ln_2.bias"], eps)
        h = F.gelu(_conv1d(h, params[p + "mlp.c_fc.weight"], params[p + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + _conv1d(h, params[p + "mlp.c_proj.weight"], params[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (c,), params["transformer.ln_f.weight"], params["transformer.ln_f.bias"], eps)
    return x @ params["transformer.wte.weight"].t()


def loss_of(logits, targets):
    """Mean cross-entropy over every position."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


# -------------------------------------------------------------------- training

def lr_at(step, lr, lr_min, warmup_steps, total_steps):
    """0-based step: linear warmup lr*(s+1)/warmup for s < warmup, then cosine
    from lr down to lr_min, reached at the last step."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    decay_steps = total_steps - warmup_steps - 1
    if decay_steps <= 0:
        return lr
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return lr_min + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - lr_min)


def make_adamw(params, lr, betas, eps, weight_decay):
    """torch AdamW; weight decay only on tensors with 2 or more dims."""
    decay = [t for t in params.values() if t.dim() >= 2]
    no_decay = [t for t in params.values() if t.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=betas, eps=eps)


def train_step(params, cfg, optimizer, windows, accumulation, lr, grad_clip, autocast_dtype=None, apply=True,
               model_forward=None, model_loss=None):
    """One optimizer step: the gradient is the mean over `accumulation`
    micro-batches of each one's mean cross-entropy; global-norm clipping
    (0 disables). With `autocast_dtype` (e.g. torch.bfloat16) forward and loss
    run under CPU autocast; parameters, gradients and AdamW state stay in
    their own dtype. apply=False consumes the micro-batches but leaves the
    parameters and AdamW's step count as they are (a step skipped for
    overflow). `model_forward` replaces this file's GPT-2 forward (torch_llama's), `model_loss` its
    cross-entropy (torch_moe's adds the router losses).
    Returns (mean loss, gradient norm before clipping)."""
    model_forward = model_forward or forward
    model_loss = model_loss or loss_of
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for _ in range(accumulation):
        inputs, targets = windows.next()
        autocast = (torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype is not None
                    else contextlib.nullcontext())
        with autocast:
            loss = model_loss(model_forward(params, cfg, inputs), targets)
        (loss / accumulation).backward()
        loss_sum += loss.item()
    tensors = list(params.values())
    if grad_clip > 0:
        norm = torch.nn.utils.clip_grad_norm_(tensors, grad_clip).item()
    else:
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.grad) for t in tensors])).item()
    if apply:
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
    return loss_sum / accumulation, norm


# ------------------------------------------------------- throughput (bench use)

def corpus_train_shards(data_dir):
    with open(os.path.join(data_dir, "meta.json")) as f:
        meta = json.load(f)
    return [os.path.join(data_dir, name) for name in meta["train_shards"]]


def loaded_blas():
    """The OpenBLAS library this process loaded and the kernel it chose."""
    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f if "libopenblas" in line})
    if not paths:
        return "no OpenBLAS loaded"
    library = ctypes.CDLL(paths[0])
    library.openblas_get_corename.restype = ctypes.c_char_p
    return f"{paths[0]} ({library.openblas_get_corename().decode()} kernels)"


AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16}


def main(argv):
    parser = argparse.ArgumentParser(description="Train the PyTorch GPT-2 and report tokens/s")
    parser.add_argument("--n-layer", type=int, required=True)
    parser.add_argument("--n-head", type=int, required=True)
    parser.add_argument("--n-embd", type=int, required=True)
    parser.add_argument("--vocab-size", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True, help="rows per micro-batch")
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of the median")
    parser.add_argument("--data", required=True, help="a prepared corpus directory (meta.json)")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--precision", choices=sorted(AUTOCAST_DTYPES), default="fp32",
                        help="fp32, or bf16 autocast around forward and loss (fp32 master weights)")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    cfg = Config(args.n_layer, args.n_head, args.n_embd, args.vocab_size, args.seq)
    params = init_parameters(cfg, args.seed)
    optimizer = make_adamw(params, 3e-4, (0.9, 0.95), 1e-8, 0.1)
    windows = TokenWindows(corpus_train_shards(args.data), args.batch, args.seq)
    tokens_per_step = args.batch * args.accumulation * args.seq
    rates = []
    for step in range(args.steps):
        start = time.perf_counter()
        loss, _ = train_step(params, cfg, optimizer, windows, args.accumulation, 3e-4, 1.0,
                             AUTOCAST_DTYPES[args.precision])
        rates.append(tokens_per_step / (time.perf_counter() - start))
        print(f"step {step + 1}: loss {loss:.4f}, {rates[-1]:.0f} tokens/s", file=sys.stderr, flush=True)
    measured = rates[args.warmup:] if len(rates) > args.warmup else rates
    print(json.dumps({"tokens_per_s": float(np.median(measured)), "steps": rates,
                      "threads": torch.get_num_threads(), "torch": torch.__version__, "precision": args.precision,
                      "blas": loaded_blas(), "mkldnn": torch.backends.mkldnn.is_available()}))


if __name__ == "__main__":
    main(sys.argv[1:])
