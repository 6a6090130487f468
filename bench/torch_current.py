"""The PyTorch reference of the throughput benchmark, written as users write training code today:
nn.Module models (GPT-2, LLaMA and Mixtral: transformers' sparse MoE block, looped or grouped), F.scaled_dot_product_attention (causal; grouped-query through
enable_gqa), nn.RMSNorm, fused AdamW, torch.compile on the model, and bf16 autocast around forward
and loss for bf16 (fp32 master weights, gradients and AdamW state), gradient clipping at 1.0.

It runs under a current PyTorch from PyPI (train_throughput.py makes the virtual environment) and
prints one JSON line: the median tokens/s after the warm-up steps (which include compilation).

Usage: python bench/torch_current.py --config configs/bench/NAME.toml --steps S --warmup W --threads N
       [--precision fp32|bf16] [--moe loop|grouped]
"""

import argparse
import json
import math
import os
import statistics
import sys
import time
import tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "golden"))
from torch_gpt2 import TokenWindows, corpus_train_shards  # noqa: E402  (the llm.c shards and batch rule)


class GPT2Block(nn.Module):
    def __init__(self, c, heads, eps):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(c, eps=eps), nn.LayerNorm(c, eps=eps)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, m):
        super().__init__()
        c = m["n_embd"]
        self.wte, self.wpe = nn.Embedding(m["vocab_size"], c), nn.Embedding(m["block_size"], c)
        self.h = nn.ModuleList(GPT2Block(c, m["n_head"], m.get("layer_norm_eps", 1e-5)) for _ in range(m["n_layer"]))
        self.ln_f = nn.LayerNorm(c, eps=m.get("layer_norm_eps", 1e-5))
        self.lm_head = nn.Linear(c, m["vocab_size"], bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


def rotary_tables(m, head_dim):
    """HuggingFace's default rotary (rotate-half pairing) at rope_theta; cos and sin [T, D]."""
    inv_freq = 1.0 / (m.get("rope_theta", 10000.0) ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(m["block_size"]).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, m):
        super().__init__()
        c = m["n_embd"]
        self.heads, self.kv_heads = m["n_head"], m.get("n_kv_head", m["n_head"])
        self.head_dim = m.get("head_dim", c // self.heads)
        eps = m.get("layer_norm_eps", 1e-5)
        self.input_layernorm, self.post_attention_layernorm = nn.RMSNorm(c, eps=eps), nn.RMSNorm(c, eps=eps)
        self.q_proj = nn.Linear(c, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(c, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(c, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, c, bias=False)
        if "intermediate_size" in m:  # a dense MLP (Mixtral's block adds its experts instead)
            f = m["intermediate_size"]
            self.gate_proj, self.up_proj = nn.Linear(c, f, bias=False), nn.Linear(c, f, bias=False)
            self.down_proj = nn.Linear(f, c, bias=False)

    def attend(self, x, cos, sin):
        """The residual stream after the attention."""
        b, t, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.heads)
        return x + self.o_proj(y.transpose(1, 2).reshape(b, t, -1))

    def forward(self, x, cos, sin):
        x = self.attend(x, cos, sin)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)), None


class Llama(nn.Module):
    def __init__(self, m, block=LlamaBlock):
        super().__init__()
        c = m["n_embd"]
        self.embed_tokens = nn.Embedding(m["vocab_size"], c)
        self.layers = nn.ModuleList(block(m) for _ in range(m["n_layer"]))
        self.norm = nn.RMSNorm(c, eps=m.get("layer_norm_eps", 1e-5))
        self.lm_head = nn.Linear(c, m["vocab_size"], bias=False)
        if m.get("tie_word_embeddings", True):
            self.lm_head.weight = self.embed_tokens.weight
        cos, sin = rotary_tables(m, self.layers[0].head_dim)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:t].to(x.dtype), self.sin[:t].to(x.dtype)
        router_logits = []
        for layer in self.layers:
            x, logits = layer(x, cos, sin)
            router_logits.append(logits)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1)) + \
            self.router_loss(router_logits)

    def router_loss(self, router_logits):
        return 0.0


class SparseMoe(nn.Module):
    """Mixtral's sparse MoE block as transformers (v5) writes it: router = gate(h), softmax in f32, top-k,
    renormalised; experts packed as gate_up_proj [E, 2F, C] and down_proj [E, C, F]. `impl` "loop" is
    transformers' default forward (expert by expert over the experts hit, index_add_ into the output);
    "grouped" is its grouped_mm implementation (tokens sorted by expert, one torch._grouped_mm per
    projection)."""

    def __init__(self, m, impl):
        super().__init__()
        c, f = m["n_embd"], m["moe_intermediate_size"]
        self.experts, self.top_k, self.impl = m["num_experts"], m["num_experts_per_tok"], impl
        self.gate = nn.Linear(c, self.experts, bias=False)
        self.gate_up_proj = nn.Parameter(torch.empty(self.experts, 2 * f, c))
        self.down_proj = nn.Parameter(torch.empty(self.experts, c, f))

    def forward(self, h):
        tokens = h.reshape(-1, h.shape[-1])
        router_logits = self.gate(tokens)
        weights = F.softmax(router_logits, dim=-1, dtype=torch.float)
        weights, chosen = torch.topk(weights, self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(tokens.dtype)
        out = (self.grouped if self.impl == "grouped" else self.looped)(tokens, weights, chosen)
        return out.view_as(h), router_logits

    def looped(self, tokens, weights, chosen):
        out = torch.zeros_like(tokens)
        expert_mask = F.one_hot(chosen, num_classes=self.experts).permute(2, 1, 0)
        for expert in torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero():
            slot, token = torch.where(expert_mask[expert[0]])
            gate, up = F.linear(tokens[token], self.gate_up_proj[expert[0]]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down_proj[expert[0]]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out

    def grouped(self, tokens, weights, chosen):
        # torch._grouped_mm is not an autocast op: bf16 operands are made here, as transformers does.
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else tokens.dtype
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = order // self.top_k
        ends = torch.cumsum(torch.bincount(flat, minlength=self.experts), 0).to(torch.int32)
        gate_up = torch._grouped_mm(tokens[token].to(dtype), self.gate_up_proj.to(dtype).transpose(1, 2), offs=ends)
        gate, up = gate_up.chunk(2, dim=-1)
        y = torch._grouped_mm(F.silu(gate) * up, self.down_proj.to(dtype).transpose(1, 2), offs=ends)
        y = y * weights.reshape(-1)[order, None].to(dtype)
        return torch.zeros_like(tokens).index_add_(0, token, y.to(tokens.dtype))


class MixtralBlock(LlamaBlock):
    def __init__(self, m, impl):
        super().__init__(m)
        self.block_sparse_moe = SparseMoe(m, impl)

    def forward(self, x, cos, sin):
        x = self.attend(x, cos, sin)
        moe, router_logits = self.block_sparse_moe(self.post_attention_layernorm(x))
        return x + moe, router_logits


class Mixtral(Llama):
    def __init__(self, m, impl):
        super().__init__(m, block=lambda m: MixtralBlock(m, impl))
        self.experts, self.top_k = m["num_experts"], m["num_experts_per_tok"]
        self.aux_coef = m.get("router_aux_loss_coef", 0.0)

    def router_loss(self, router_logits):
        """transformers' load_balancing_loss_func over every layer's router logits, times its coefficient."""
        probabilities = F.softmax(torch.cat(router_logits, dim=0).float(), dim=-1)
        _, chosen = torch.topk(probabilities, self.top_k, dim=-1)
        tokens_per_expert = F.one_hot(chosen, self.experts).float().mean(dim=0)
        balance = torch.sum(tokens_per_expert * probabilities.mean(dim=0).unsqueeze(0)) * self.experts
        return self.aux_coef * balance


def make_model(m, moe_impl):
    family = m.get("family", "gpt2")
    if family == "mixtral":
        return Mixtral(m, moe_impl)
    return Llama(m) if family == "llama" else GPT2(m)


def main(argv):
    parser = argparse.ArgumentParser(description="Train a configs/bench model in current PyTorch; report tokens/s")
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of the median (compilation included)")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--moe", choices=["loop", "grouped"], default="loop",
                        help="Mixtral's experts: transformers' loop over experts, or its grouped_mm form")
    args = parser.parse_args(argv)

    with open(args.config, "rb") as f:
        config = tomllib.load(f)
    m, train = config["model"], config["train"]
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = make_model(m, args.moe)
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            nn.init.normal_(p, 0.0, 0.02)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": train.get("weight_decay", 0.1)},
                                   {"params": rest, "weight_decay": 0.0}],
                                  lr=train.get("lr", 3e-4), betas=(0.9, 0.95), fused=True)
    compiled = torch.compile(model)
    windows = TokenWindows(corpus_train_shards(os.path.join(REPO, config["data"]["dir"])), train["batch_size"],
                           m["block_size"])
    tokens_per_step = train["batch_size"] * m["block_size"]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")
    rates = []
    for step in range(args.steps):
        inputs, targets = windows.next()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            loss = compiled(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss_value = loss.item()
        rates.append(tokens_per_step / (time.perf_counter() - start))
        print(f"step {step + 1}: loss {loss_value:.4f}, {rates[-1]:.0f} tokens/s", file=sys.stderr, flush=True)
        if not math.isfinite(loss_value):
            sys.exit(f"loss {loss_value} at step {step + 1}")
    measured = rates[args.warmup:] if len(rates) > args.warmup else rates
    print(json.dumps({"tokens_per_s": statistics.median(measured), "steps": rates, "threads": torch.get_num_threads(),
                      "torch": torch.__version__, "precision": args.precision, "compiled": True, "moe": args.moe,
                      "mkldnn": torch.backends.mkldnn.is_available()}))


if __name__ == "__main__":
    main(sys.argv[1:])
