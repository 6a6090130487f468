"""An independent PyTorch LLaMA, the reference Strata's LLaMA family is checked against.

Written from HuggingFace transformers' LlamaForCausalLM formulas, not from Strata's code:
  - RMSNorm: normalise in float32, cast back to the activation dtype, then multiply by the weight;
  - rotary embeddings, rotate-half pairing (dimension i with i + d/2): inv_freq = 1 / theta^(2j/d)
    in float32, `linear` (inv_freq / factor) and `llama3` frequency scaling, angles
    position * inv_freq in float32, cos and sin cast to the activation dtype;
  - grouped-query attention: query head h reads key/value head h // (H / KV) (k and v repeated
    here, as HF's eager attention does), causal softmax of q k^T / sqrt(d);
  - SwiGLU MLP: down(silu(gate(x)) * up(x)); nn.Linear layouts (weights [out, in]), optional
    biases on q/k/v/o and on the MLP; tied or untied LM head; no position table.
The file formats, batch rule, LR schedule and AdamW groups are torch_gpt2's.
"""

import math

import torch
import torch.nn.functional as F

import torch_gpt2
from torch_gpt2 import (TokenWindows, loss_of, lr_at, make_adamw, read_checkpoint_tensors,  # noqa: F401 (re-exported)
                        read_safetensors, safetensors_dtypes)


class Config:
    def __init__(self, c):
        """From golden.json's config (Strata's model.* keys)."""
        self.n_layer, self.n_head, self.n_embd = c["n_layer"], c["n_head"], c["n_embd"]
        self.n_kv_head = c["n_kv_head"] or c["n_head"]
        self.head_dim = c["head_dim"] or c["n_embd"] // c["n_head"]
        self.intermediate_size = c["intermediate_size"]
        self.vocab_size, self.block_size = c["vocab_size"], c["block_size"]
        self.rms_norm_eps = c["layer_norm_eps"]
        self.rope_theta = c["rope_theta"]
        self.rope_scaling = c["rope_scaling"]  # {"type", "factor", "low_freq_factor", ...}
        self.tie_word_embeddings = c["tie_word_embeddings"]
        self.attention_bias, self.mlp_bias = c["attention_bias"], c["mlp_bias"]

    @classmethod
    def from_golden(cls, c):
        return cls(c)

    @classmethod
    def from_hf(cls, c):
        """From LlamaForCausalLM's config.json (v4 spelling)."""
        rope = c.get("rope_scaling") or {}
        return cls({"n_layer": c["num_hidden_layers"], "n_head": c["num_attention_heads"],
                    "n_kv_head": c.get("num_key_value_heads"), "n_embd": c["hidden_size"],
                    "head_dim": c.get("head_dim"), "intermediate_size": c["intermediate_size"],
                    "vocab_size": c["vocab_size"], "block_size": c["max_position_embeddings"],
                    "layer_norm_eps": c["rms_norm_eps"], "rope_theta": c.get("rope_theta", 10000.0),
                    "rope_scaling": {"type": rope.get("rope_type", "none"), "factor": rope.get("factor"),
                                     "low_freq_factor": rope.get("low_freq_factor"),
                                     "high_freq_factor": rope.get("high_freq_factor"),
                                     "original_max_positions": rope.get("original_max_position_embeddings")},
                    "tie_word_embeddings": c.get("tie_word_embeddings", False),
                    "attention_bias": c.get("attention_bias", False), "mlp_bias": c.get("mlp_bias", False)})


def parameter_shapes(cfg):
    """LlamaForCausalLM names; lm_head only when untied."""
    c, d, f = cfg.n_embd, cfg.head_dim, cfg.intermediate_size
    q, kv = cfg.n_head * d, cfg.n_kv_head * d
    shapes = {"model.embed_tokens.weight": (cfg.vocab_size, c)}

    def linear(name, out, inp, bias):
        shapes[name + ".weight"] = (out, inp)
        if bias:
            shapes[name + ".bias"] = (out,)

    for i in range(cfg.n_layer):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (c,)
        linear(p + "self_attn.q_proj", q, c, cfg.attention_bias)
        linear(p + "self_attn.k_proj", kv, c, cfg.attention_bias)
        linear(p + "self_attn.v_proj", kv, c, cfg.attention_bias)
        linear(p + "self_attn.o_proj", c, q, cfg.attention_bias)
        shapes[p + "post_attention_layernorm.weight"] = (c,)
        linear(p + "mlp.gate_proj", f, c, cfg.mlp_bias)
        linear(p + "mlp.up_proj", f, c, cfg.mlp_bias)
        linear(p + "mlp.down_proj", c, f, cfg.mlp_bias)
    shapes["model.norm.weight"] = (c,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, c)
    return shapes


def load_parameters(cfg, path, dtype):
    """Leaf tensors (requiring grad) from a safetensors file, shapes checked."""
    return torch_gpt2.load_parameters(cfg, path, dtype, parameter_shapes(cfg))


def inverse_frequencies(cfg):
    """HF's default rope init, then its linear or llama3 scaling, all in float32."""
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = cfg.rope_scaling
    if scaling["type"] == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif scaling["type"] == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        original = scaling["original_max_positions"]
        low_freq_wavelen, high_freq_wavelen = original / low, original / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (original / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    return inv_freq


def rotary_cos_sin(cfg, seq, dtype):
    inv_freq = inverse_frequencies(cfg)
    positions = torch.arange(seq, dtype=torch.float32)
    freqs = positions[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(x, weight, eps):
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def _linear(params, name, x):
    return F.linear(x, params[name + ".weight"], params.get(name + ".bias"))


def forward(params, cfg, tokens):
    """Logits [B, T, V] for int64 tokens [B, T]."""
    batch, seq = tokens.shape
    heads, kv_heads, d = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    x = F.embedding(tokens, params["model.embed_tokens.weight"])
    cos, sin = rotary_cos_sin(cfg, seq, x.dtype)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    for i in range(cfg.n_layer):
        p = f"model.layers.{i}."
        h = rms_norm(x, params[p + "input_layernorm.weight"], cfg.rms_norm_eps)
        q = _linear(params, p + "self_attn.q_proj", h).view(batch, seq, heads, d).transpose(1, 2)
        k = _linear(params, p + "self_attn.k_proj", h).view(batch, seq, kv_heads, d).transpose(1, 2)
        v = _linear(params, p + "self_attn.v_proj", h).view(batch, seq, kv_heads, d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)
        weights = F.softmax(scores.masked_fill(~causal, float("-inf")).float(), dim=-1).to(q.dtype)
        attended = (weights @ v).transpose(1, 2).reshape(batch, seq, heads * d)
        x = x + _linear(params, p + "self_attn.o_proj", attended)
        h = rms_norm(x, params[p + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        gated = F.silu(_linear(params, p + "mlp.gate_proj", h)) * _linear(params, p + "mlp.up_proj", h)
        x = x + _linear(params, p + "mlp.down_proj", gated)
    x = rms_norm(x, params["model.norm.weight"], cfg.rms_norm_eps)
    head = params["model.embed_tokens.weight"] if cfg.tie_word_embeddings else params["lm_head.weight"]
    return x @ head.t()


def train_step(params, cfg, optimizer, windows, accumulation, lr, grad_clip, autocast_dtype=None, apply=True):
    """torch_gpt2.train_step with this model's forward pass."""
    return torch_gpt2.train_step(params, cfg, optimizer, windows, accumulation, lr, grad_clip, autocast_dtype, apply,
                                 model_forward=forward)
