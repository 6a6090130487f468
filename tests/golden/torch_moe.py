"""An independent PyTorch Mixtral, Qwen3-MoE, Qwen2-MoE and OLMoE, the reference Strata's MoE families are
checked against.

Written from HuggingFace transformers' formulas, not from Strata's code:
  - attention as LlamaForCausalLM's (torch_llama), Qwen3-MoE with its RMSNorm on each head of q and
    k (q_norm, k_norm over head_dim) before the rotary, OLMoE with its RMSNorm over all of q and all
    of k (OlmoeAttention), Qwen2-MoE with biases on q, k and v (not o);
  - the sparse MoE block as MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock compute it: router_logits
    = gate(h); routing weights = softmax over the experts, torch.topk, divided by their sum (Mixtral
    always, Qwen3-MoE with norm_topk_prob); then, expert by expert, the tokens that chose it through
    down(silu(gate(x)) * up(x)), times their weight, index_add_-ed into the output; Qwen2-MoE adds
    sigmoid(shared_expert_gate(h)) * shared_expert(h);
  - the loss: cross-entropy + router_aux_loss_coef * load_balancing_loss_func(all layers' router
    logits) (softmax, top-k one-hot masks, tokens_per_expert = mean over tokens of the masks,
    router_prob_per_expert = mean of the probabilities, num_experts * sum of their product), plus
    router_z_loss_coef * the mean over tokens of logsumexp(router_logits)^2 (Switch Transformers'
    router_z_loss_func).
Parameters use Strata's names: each expert projection stacked over the experts
(`...experts.w1.weight` [E, F, C]), expert e's being slice e, as the Hub's experts.{e}.w1.weight is.
"""

import math

import torch
import torch.nn.functional as F

import torch_gpt2
import torch_llama
from torch_gpt2 import (TokenWindows, lr_at, make_adamw, read_checkpoint_tensors,  # noqa: F401 (re-exported)
                        read_safetensors, safetensors_dtypes)
from torch_llama import rms_norm, rotary_cos_sin, rotate_half

QWEN_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
FLAVOURS = {
    "mixtral": {"block": "block_sparse_moe.", "projections": ("w1", "w3", "w2"), "qk_norm": None,
                "always_norm_topk": True, "shared_expert": False, "qkv_bias": False},
    "qwen3_moe": {"block": "mlp.", "projections": QWEN_PROJECTIONS, "qk_norm": "per_head",
                  "always_norm_topk": False, "shared_expert": False, "qkv_bias": False},
    "qwen2_moe": {"block": "mlp.", "projections": QWEN_PROJECTIONS, "qk_norm": None,
                  "always_norm_topk": False, "shared_expert": True, "qkv_bias": True},
    "olmoe": {"block": "mlp.", "projections": QWEN_PROJECTIONS, "qk_norm": "whole",
              "always_norm_topk": False, "shared_expert": False, "qkv_bias": False},
}


class Config(torch_llama.Config):
    def __init__(self, c):
        super().__init__(c)
        self.family = c["family"]
        self.flavour = FLAVOURS[self.family]
        self.num_experts, self.top_k = c["num_experts"], c["num_experts_per_tok"]
        self.moe_intermediate_size = c["moe_intermediate_size"]
        # Strata writes these keys only when they are set (off and 0 otherwise).
        self.norm_topk_prob = self.flavour["always_norm_topk"] or c.get("norm_topk_prob", False)
        self.router_aux_loss_coef = c.get("router_aux_loss_coef", 0.0)
        self.router_z_loss_coef = c.get("router_z_loss_coef", 0.0)
        self.shared_expert_intermediate_size = c.get("shared_expert_intermediate_size", 0)


def parameter_shapes(cfg):
    c, d, f, e = cfg.n_embd, cfg.head_dim, cfg.moe_intermediate_size, cfg.num_experts
    q, kv = cfg.n_head * d, cfg.n_kv_head * d
    gate, up, down = cfg.flavour["projections"]
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, c)}
    for i in range(cfg.n_layer):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (c,)
        shapes[p + "self_attn.q_proj.weight"] = (q, c)
        shapes[p + "self_attn.k_proj.weight"] = (kv, c)
        shapes[p + "self_attn.v_proj.weight"] = (kv, c)
        shapes[p + "self_attn.o_proj.weight"] = (c, q)
        if cfg.flavour["qkv_bias"]:
            for name, width in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                shapes[p + f"self_attn.{name}.bias"] = (width,)
        if cfg.flavour["qk_norm"]:
            per_head = cfg.flavour["qk_norm"] == "per_head"
            shapes[p + "self_attn.q_norm.weight"] = (d if per_head else q,)
            shapes[p + "self_attn.k_norm.weight"] = (d if per_head else kv,)
        shapes[p + "post_attention_layernorm.weight"] = (c,)
        block = p + cfg.flavour["block"]
        shapes[block + "gate.weight"] = (e, c)
        shapes[block + f"experts.{gate}.weight"] = (e, f, c)
        shapes[block + f"experts.{up}.weight"] = (e, f, c)
        shapes[block + f"experts.{down}.weight"] = (e, c, f)
        if cfg.flavour["shared_expert"]:
            s = cfg.shared_expert_intermediate_size
            shapes[block + "shared_expert.gate_proj.weight"] = (s, c)
            shapes[block + "shared_expert.up_proj.weight"] = (s, c)
            shapes[block + "shared_expert.down_proj.weight"] = (c, s)
            shapes[block + "shared_expert_gate.weight"] = (1, c)
    shapes["model.norm.weight"] = (c,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, c)
    return shapes


def load_parameters(cfg, path, dtype):
    return torch_gpt2.load_parameters(cfg, path, dtype, parameter_shapes(cfg))


def attention(params, cfg, p, h, cos, sin, causal):
    batch, seq, _ = h.shape
    heads, kv_heads, d = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    def project(name):
        return F.linear(h, params[p + f"self_attn.{name}.weight"], params.get(p + f"self_attn.{name}.bias"))

    q, k, v = project("q_proj"), project("k_proj"), project("v_proj")
    if cfg.flavour["qk_norm"] == "whole":  # OlmoeAttention: over the whole projection, before the heads split
        q = rms_norm(q, params[p + "self_attn.q_norm.weight"], cfg.rms_norm_eps)
        k = rms_norm(k, params[p + "self_attn.k_norm.weight"], cfg.rms_norm_eps)
    q, k = q.view(batch, seq, heads, d), k.view(batch, seq, kv_heads, d)
    v = v.view(batch, seq, kv_heads, d).transpose(1, 2)
    if cfg.flavour["qk_norm"] == "per_head":
        q = rms_norm(q, params[p + "self_attn.q_norm.weight"], cfg.rms_norm_eps)
        k = rms_norm(k, params[p + "self_attn.k_norm.weight"], cfg.rms_norm_eps)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
    weights = F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    attended = (weights @ v).transpose(1, 2).reshape(batch, seq, heads * d)
    return F.linear(attended, params[p + "self_attn.o_proj.weight"])


def sparse_moe(params, cfg, block, h):
    """(output, router_logits) as MixtralSparseMoeBlock's forward computes them."""
    batch, seq, width = h.shape
    tokens = h.reshape(-1, width)
    router_logits = F.linear(tokens, params[block + "gate.weight"])
    routing_weights = F.softmax(router_logits, dim=1)
    routing_weights, selected_experts = torch.topk(routing_weights, cfg.top_k, dim=-1)
    if cfg.norm_topk_prob:
        routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
    gate, up, down = (params[block + f"experts.{name}.weight"] for name in cfg.flavour["projections"])
    output = torch.zeros_like(tokens)
    expert_mask = F.one_hot(selected_experts, num_classes=cfg.num_experts).permute(2, 1, 0)
    for expert in range(cfg.num_experts):
        slot, chosen = torch.where(expert_mask[expert])
        state = tokens[chosen]
        expert_out = F.linear(F.silu(F.linear(state, gate[expert])) * F.linear(state, up[expert]), down[expert])
        # In the output's dtype, as transformers adds it (under bf16 autocast the experts' products are bf16).
        output.index_add_(0, chosen, (expert_out * routing_weights[chosen, slot, None]).to(output.dtype))
    if cfg.flavour["shared_expert"]:
        shared = block + "shared_expert."
        hidden = F.silu(F.linear(tokens, params[shared + "gate_proj.weight"])) * F.linear(
            tokens, params[shared + "up_proj.weight"])
        gate = torch.sigmoid(F.linear(tokens, params[block + "shared_expert_gate.weight"]))
        output = output + gate * F.linear(hidden, params[shared + "down_proj.weight"])
    return output.reshape(batch, seq, width), router_logits


def forward(params, cfg, tokens):
    """Logits [B, T, V] for int64 tokens [B, T], carrying the router losses (weighted by their
    coefficients) as `.router_loss` for loss_of."""
    seq = tokens.shape[1]
    x = F.embedding(tokens, params["model.embed_tokens.weight"])
    cos, sin = rotary_cos_sin(cfg, seq, x.dtype)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    router_logits = []
    for i in range(cfg.n_layer):
        p = f"model.layers.{i}."
        h = rms_norm(x, params[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        x = x + attention(params, cfg, p, h, cos, sin, causal)
        h = rms_norm(x, params[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        moe, logits = sparse_moe(params, cfg, p + cfg.flavour["block"], h)
        x = x + moe
        router_logits.append(logits)
    x = rms_norm(x, params["model.norm.weight"], cfg.rms_norm_eps)
    head = params["model.embed_tokens.weight"] if cfg.tie_word_embeddings else params["lm_head.weight"]
    logits = x @ head.t()
    logits.router_loss = (cfg.router_aux_loss_coef * load_balancing_loss(router_logits, cfg.num_experts, cfg.top_k) +
                          cfg.router_z_loss_coef * router_z_loss(router_logits))
    return logits


def load_balancing_loss(router_logits, num_experts, top_k):
    """transformers' load_balancing_loss_func without an attention mask."""
    concatenated = torch.cat(router_logits, dim=0)
    routing_weights = F.softmax(concatenated, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.to(routing_weights.dtype), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts


def router_z_loss(router_logits):
    """Switch Transformers' router_z_loss_func over every layer's logits."""
    log_z = torch.logsumexp(torch.cat(router_logits, dim=0), dim=-1)
    return torch.mean(log_z ** 2)


def loss_of(logits, targets):
    """The training loss: mean cross-entropy plus the router losses forward attached."""
    return torch_gpt2.loss_of(logits, targets) + logits.router_loss


def train_step(params, cfg, optimizer, windows, accumulation, lr, grad_clip, autocast_dtype=None, apply=True):
    """torch_gpt2.train_step with this model's forward pass and loss."""
    return torch_gpt2.train_step(params, cfg, optimizer, windows, accumulation, lr, grad_clip, autocast_dtype, apply,
                                 model_forward=forward, model_loss=loss_of)
