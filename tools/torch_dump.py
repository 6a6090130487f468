#!/usr/bin/env python3
"""Golden dump for `strata compare --golden`: a HuggingFace-layout GPT-2 or LLaMA in plain PyTorch.

Reads what `strata compare CONFIG --golden-inputs DIR` writes (DIR/config.json and DIR/model.safetensors,
a HuggingFace model directory of the run's initial weights; DIR/batch.safetensors, the run's first
micro-batch), runs the model forward and backward on that batch and writes, under Strata's tensor names,
a safetensors file of:
  - the embeddings, each block's inputs of its norms and its two residual sums, the final norm, the
    logits and the loss (`<node label>.forward.<output>`);
  - every parameter's gradient (`<parameter>.grad`), of this micro-batch's mean cross-entropy;
  - the batch itself (`tokens`, `targets`), so that Strata checks the dump ran its batch.

The model follows transformers' formulas, written here from them (no transformers import):
GPT2LMHeadModel (learned positions, pre-LayerNorm, causal attention, tanh GELU, Conv1D weights
[in, out], tied head) and LlamaForCausalLM (RMSNorm normalised in float32, rotary embeddings with
rotate-half pairing and `linear` / `llama3` frequency scaling in float32, grouped-query attention,
SwiGLU MLP, nn.Linear weights [out, in], optional biases, tied or untied head). Runs with Debian's
torch 1.13 and newer; uses the `safetensors` package when it is installed, else reads and writes the
format itself (8-byte little-endian header length, JSON header, raw little-endian data).

Usage: torch_dump.py DIR --out DUMP.safetensors [--dtype float32|float64] [--threads N]
Then:  strata compare CONFIG --golden DUMP.safetensors [--b ...]
"""

import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}


# ------------------------------------------------------------------ safetensors

def read_safetensors(path):
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        blob = f.read()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + length])
    data = blob[8 + length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = _DTYPES[entry["dtype"]]
        raw = bytearray(data[begin:end])
        tensor = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = tensor.reshape(entry["shape"]).clone()
    return tensors


def write_safetensors(path, tensors, metadata):
    tensors = {name: t.detach().contiguous().cpu() for name, t in tensors.items()}
    try:
        from safetensors.torch import save_file
        save_file(tensors, path, metadata=metadata)
        return
    except ImportError:
        pass
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)  # the data starts 8-aligned
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    os.replace(path + ".tmp", path)


# ----------------------------------------------------------------------- GPT-2

def gpt2_forward(params, config, tokens, out):
    batch, seq = tokens.shape
    c, heads = config["n_embd"], config["n_head"]
    d, eps = c // heads, config.get("layer_norm_epsilon", 1e-5)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()

    def conv1d(x, name):  # Conv1D: x @ W + b, W [in, out]
        return x @ params[name + ".weight"] + params[name + ".bias"]

    def norm(x, name):
        return F.layer_norm(x, (c,), params[name + ".weight"], params[name + ".bias"], eps)

    out["wte.forward.out"] = token = F.embedding(tokens, params["transformer.wte.weight"])
    out["wpe.forward.out"] = position = F.embedding(torch.arange(seq), params["transformer.wpe.weight"])
    out["embed.forward.out"] = x = token + position
    for i in range(config["n_layer"]):
        p = f"transformer.h.{i}."
        out[p + "ln_1.forward.y"] = h = norm(x, p + "ln_1")
        q, k, v = conv1d(h, p + "attn.c_attn").split(c, dim=2)
        q, k, v = (t.view(batch, seq, heads, d).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        attended = (F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v).transpose(1, 2)
        out[p + "attn.forward.out"] = attended = attended.reshape(batch, seq, c)
        out[p + "attn.residual.forward.out"] = x = x + conv1d(attended, p + "attn.c_proj")
        out[p + "ln_2.forward.y"] = h = norm(x, p + "ln_2")
        h = F.gelu(conv1d(h, p + "mlp.c_fc"), approximate="tanh")
        out[p + "mlp.residual.forward.out"] = x = x + conv1d(h, p + "mlp.c_proj")
    out["transformer.ln_f.forward.y"] = x = norm(x, "transformer.ln_f")
    return x @ params["transformer.wte.weight"].t()


# ----------------------------------------------------------------------- LLaMA

def llama_inverse_frequencies(config, d):
    inv_freq = 1.0 / (config.get("rope_theta", 10000.0) ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        original = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > original / low, inv_freq / factor, inv_freq)
        smooth = (original / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < original / high) * ~(wavelen > original / low)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif kind not in ("default", "none"):
        raise ValueError(f"rope scaling '{kind}' is not one this dump knows")
    return inv_freq


def llama_forward(params, config, tokens, out):
    batch, seq = tokens.shape
    heads, c = config["num_attention_heads"], config["hidden_size"]
    kv_heads = config.get("num_key_value_heads") or heads
    d = config.get("head_dim") or c // heads
    eps = config["rms_norm_eps"]
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()

    def norm(x, name):  # RMSNorm: normalise in float32, cast back, times the weight
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return params[name + ".weight"] * h.to(x.dtype)

    def linear(x, name):  # nn.Linear: x W^T (+ b), W [out, in]
        return F.linear(x, params[name + ".weight"], params.get(name + ".bias"))

    def rotate_half(x):
        return torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1)

    freqs = torch.arange(seq, dtype=torch.float32)[:, None] * llama_inverse_frequencies(config, d)[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    out["model.embed_tokens.forward.out"] = x = F.embedding(tokens, params["model.embed_tokens.weight"])
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.forward.y"] = h = norm(x, p + "input_layernorm")
        q = linear(h, p + "self_attn.q_proj").view(batch, seq, heads, d).transpose(1, 2)
        k = linear(h, p + "self_attn.k_proj").view(batch, seq, kv_heads, d).transpose(1, 2)
        v = linear(h, p + "self_attn.v_proj").view(batch, seq, kv_heads, d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        weights = F.softmax(scores.masked_fill(~causal, float("-inf")).float(), dim=-1).to(q.dtype)
        out[p + "self_attn.forward.out"] = attended = (weights @ v).transpose(1, 2).reshape(batch, seq, heads * d)
        out[p + "self_attn.residual.forward.out"] = x = x + linear(attended, p + "self_attn.o_proj")
        out[p + "post_attention_layernorm.forward.y"] = h = norm(x, p + "post_attention_layernorm")
        gated = F.silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj")
        out[p + "mlp.residual.forward.out"] = x = x + linear(gated, p + "mlp.down_proj")
    out["model.norm.forward.y"] = x = norm(x, "model.norm")
    tied = config.get("tie_word_embeddings", False)
    return x @ params["model.embed_tokens.weight" if tied else "lm_head.weight"].t()


FORWARDS = {"gpt2": gpt2_forward, "llama": llama_forward}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="what `strata compare CONFIG --golden-inputs DIR` wrote")
    parser.add_argument("--out", required=True, help="the dump to write (safetensors)")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                        help="what PyTorch computes in (float64: a reference without rounding of its own)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    with open(os.path.join(args.dir, "config.json")) as f:
        config = json.load(f)
    model_type = config.get("model_type")
    if model_type not in FORWARDS:
        raise SystemExit(f"{args.dir}/config.json: model_type '{model_type}' is not gpt2 or llama")
    dtype = getattr(torch, args.dtype)
    params = {name: t.to(dtype).requires_grad_() for name, t in read_safetensors(os.path.join(args.dir, "model.safetensors")).items()}
    batch = read_safetensors(os.path.join(args.dir, "batch.safetensors"))
    tokens, targets = batch["tokens"].long(), batch["targets"].long()

    out = {}
    logits = FORWARDS[model_type](params, config, tokens, out)
    out["lm_head.forward.out"] = logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    out["loss.forward.loss"] = loss
    loss.backward()
    dump = {name: t.detach() for name, t in out.items()}
    dump.update({name + ".grad": t.grad for name, t in params.items()})
    dump["tokens"], dump["targets"] = batch["tokens"], batch["targets"]
    write_safetensors(args.out, dump, {"format": "pt", "producer": "tools/torch_dump.py", "torch": torch.__version__,
                                       "dtype": args.dtype})
    print(f"{args.out}: {len(dump) - 2} tensors of {model_type} ({args.dtype}, torch {torch.__version__}); loss "
          f"{loss.item():.6f}")


if __name__ == "__main__":
    main(sys.argv[1:])
