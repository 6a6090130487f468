#include "model/llama/llama_layers.h"

#include "core/error.h"

namespace strata::llama {

namespace {

// HuggingFace's LLaMA initialisation: every weight normal(0, initializer_range = 0.02).
constexpr float kStddev = 0.02f;

// An RMSNorm over each head of x [B, T, heads * D]: x seen as [B, T, heads, D] and back.
int per_head_rms_norm(ModelEmitter& e, const ModelConfig& config, int x, int64_t heads, const std::string& name) {
  const int64_t d = config.head_size();
  const int split = e.op("reshape", {x}, {{"keep", int64_t{2}}, {"tail", std::vector<int64_t>{heads, d}}},
                         name + ".split_heads");
  const int normed = e.op("rms_norm", {split, e.param(name + ".weight", {d})}, {{"eps", config.layer_norm_eps}}, name);
  return e.op("reshape", {normed}, {{"keep", int64_t{2}}, {"tail", std::vector<int64_t>{heads * d}}},
              name + ".merge_heads");
}

// An RMSNorm over all of x's features (OLMoE's q and k norms).
int width_rms_norm(ModelEmitter& e, const ModelConfig& config, int x, const std::string& name) {
  return e.op("rms_norm", {x, e.param(name + ".weight", {e.shape(x).back()})}, {{"eps", config.layer_norm_eps}},
              name);
}

}  // namespace

int rms_norm(ModelEmitter& e, const ModelConfig& config, int x, const std::string& name) {
  return e.op("rms_norm", {x, e.param(name + ".weight", {config.n_embd})}, {{"eps", config.layer_norm_eps}}, name);
}

int linear(ModelEmitter& e, int x, const std::string& name, int64_t in, int64_t out, bool bias) {
  int y = e.op("matmul", {x, e.param(name + ".weight", {out, in})}, {{"trans_a", false}, {"trans_b", true}}, name);
  if (bias) y = e.op("add", {y, e.param(name + ".bias", {out})}, {}, name + ".bias");
  return y;
}

int rope(ModelEmitter& e, const ModelConfig& config, int x, int positions, const std::string& label) {
  const RopeScaling& s = config.rope_scaling;
  return e.op("rope", {x, positions},
              {{"head_dim", config.head_size()},
               {"theta", config.rope_theta},
               {"scaling", s.type},
               {"factor", s.factor},
               {"low_freq_factor", s.low_freq_factor},
               {"high_freq_factor", s.high_freq_factor},
               {"original_max_positions", s.original_max_positions},
               {"inverse", false}},
              label);
}

int self_attention(ModelEmitter& e, const ModelConfig& config, int h, int positions, const std::string& prefix,
                   const AttentionStyle& style) {
  const int64_t c = config.n_embd, d = config.head_size();
  const std::string attn = prefix + "self_attn.";
  const bool ab = config.attention_bias;
  int q = linear(e, h, attn + "q_proj", c, config.n_head * d, ab);
  int k = linear(e, h, attn + "k_proj", c, config.kv_heads() * d, ab);
  // The heads the projections made here: all of them, or the planner's tensor-parallel rank's share.
  const int64_t heads = e.shape(q).back() / d, kv_heads = e.shape(k).back() / d;
  if (style.qk_norm == QkNorm::PerHead) {
    q = per_head_rms_norm(e, config, q, heads, attn + "q_norm");
    k = per_head_rms_norm(e, config, k, kv_heads, attn + "k_norm");
  } else if (style.qk_norm == QkNorm::Whole) {
    q = width_rms_norm(e, config, q, attn + "q_norm");
    k = width_rms_norm(e, config, k, attn + "k_norm");
  }
  q = rope(e, config, q, positions, attn + "rotary_q");
  k = rope(e, config, k, positions, attn + "rotary_k");
  const int v = linear(e, h, attn + "v_proj", c, config.kv_heads() * d, ab);
  const int attended = e.attention("grouped_attention", {q, k, v}, {{"n_head", heads}, {"n_kv_head", kv_heads}},
                                   prefix + "self_attn");
  return linear(e, attended, attn + "o_proj", config.n_head * d, c, ab && style.o_proj_bias);
}

int embed(ModelEmitter& e, const ModelConfig& config, int tokens) {
  const int table = e.param("model.embed_tokens.weight", {config.vocab_size, config.n_embd});
  return e.op("embedding", {table, tokens}, {}, "model.embed_tokens");
}

int lm_head(ModelEmitter& e, const ModelConfig& config, int normed) {
  const std::string table = config.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  const int weight = e.param(table, {config.vocab_size, config.n_embd});
  return e.op("matmul", {normed, weight}, {{"trans_a", false}, {"trans_b", true}}, "lm_head");
}

// q, k and v projections (and their biases) column-parallel, so each rank holds whole query and
// key/value heads (the rotary and the grouped attention run on them locally: the kv heads must split
// too); o_proj row-parallel (its bias added after the sum); the embedding and an untied head
// vocab-parallel. nn.Linear stores [out, in].
std::vector<ShardRule> attention_sharding_rules() {
  const WeightLayout linear = WeightLayout::OutIn;
  return {
      {"model.layers.*.self_attn.q_proj.*", ShardStyle::ColumnParallel, 1, linear},
      {"model.layers.*.self_attn.k_proj.*", ShardStyle::ColumnParallel, 1, linear},
      {"model.layers.*.self_attn.v_proj.*", ShardStyle::ColumnParallel, 1, linear},
      {"model.layers.*.self_attn.o_proj.weight", ShardStyle::RowParallel, 1, linear},
      {"model.embed_tokens.weight*", ShardStyle::VocabParallel, 1, linear},  // and the LM head's copy
      {"lm_head.weight", ShardStyle::VocabParallel, 1, linear},
  };
}

// The embedding is the vocabulary-parallel lookup itself (every rank looks up every position), off the stream.
ResidualStream residual_stream() {
  return {{"input_layernorm", "self_attn.residual", "post_attention_layernorm", "mlp.residual", "model.norm"}, {}};
}

void add_linear_specs(std::vector<ParamSpec>& specs, const std::string& name, int64_t out, int64_t in, bool bias) {
  specs.push_back({name + ".weight", {out, in}, Init::Normal, kStddev, true});
  if (bias) specs.push_back({name + ".bias", {out}, Init::Zeros, 0, false});
}

void add_attention_specs(std::vector<ParamSpec>& specs, const ModelConfig& config, const std::string& prefix,
                         const AttentionStyle& style) {
  const int64_t c = config.n_embd, q = config.n_head * config.head_size();
  const int64_t kv = config.kv_heads() * config.head_size();
  const bool ab = config.attention_bias;
  specs.push_back({prefix + "input_layernorm.weight", {c}, Init::Ones, 0, false});
  add_linear_specs(specs, prefix + "self_attn.q_proj", q, c, ab);
  add_linear_specs(specs, prefix + "self_attn.k_proj", kv, c, ab);
  add_linear_specs(specs, prefix + "self_attn.v_proj", kv, c, ab);
  add_linear_specs(specs, prefix + "self_attn.o_proj", c, q, ab && style.o_proj_bias);
  if (style.qk_norm != QkNorm::None) {
    const bool per_head = style.qk_norm == QkNorm::PerHead;
    specs.push_back({prefix + "self_attn.q_norm.weight", {per_head ? config.head_size() : q}, Init::Ones, 0, false});
    specs.push_back({prefix + "self_attn.k_norm.weight", {per_head ? config.head_size() : kv}, Init::Ones, 0, false});
  }
  specs.push_back({prefix + "post_attention_layernorm.weight", {c}, Init::Ones, 0, false});
}

void validate_attention(const ModelConfig& c) {
  if (c.head_dim == 0 && c.n_embd % c.n_head != 0) {
    fail("key 'model.n_head' ({}) must divide 'model.n_embd' ({}), or set model.head_dim", c.n_head, c.n_embd);
  }
  if (c.head_size() % 2 != 0) {
    fail("the head size ({}) must be even for rotary embeddings (model.head_dim)", c.head_size());
  }
  if (c.n_head % c.kv_heads() != 0) {
    fail("key 'model.n_kv_head' ({}) must divide model.n_head ({})", c.kv_heads(), c.n_head);
  }
  if (!(c.rope_theta > 0)) fail("key 'model.rope_theta' must be positive, got {}", c.rope_theta);
  const RopeScaling& s = c.rope_scaling;
  if (s.type != "none" && s.type != "linear" && s.type != "llama3") {
    fail("key 'model.rope_scaling' must be \"none\", \"linear\" or \"llama3\", got \"{}\"", s.type);
  }
  if (!(s.factor > 0)) fail("key 'model.rope_factor' must be positive, got {}", s.factor);
  if (s.type == "llama3") {
    if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor)) {
      fail("keys 'model.rope_low_freq_factor' ({}) and 'model.rope_high_freq_factor' ({}) must satisfy "
           "0 < low < high",
           s.low_freq_factor, s.high_freq_factor);
    }
    if (s.original_max_positions <= 0) {
      fail("key 'model.rope_original_max_positions' must be positive, got {}", s.original_max_positions);
    }
  }
}

}  // namespace strata::llama
