#include "model/llama/llama_family.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/hf_config_reader.h"
#include "model/llama/llama_hf_config.h"

namespace strata {

namespace {

// model.embed_tokens.weight [V, C]; model.layers.{i}.input_layernorm.weight [C],
// .self_attn.{q_proj [H·D, C], k_proj [KV·D, C], v_proj [KV·D, C], o_proj [C, H·D]}.weight
// (and .bias with attention_bias, o_proj's too), .post_attention_layernorm.weight [C],
// .mlp.{gate_proj [F, C], up_proj [F, C], down_proj [C, F]}.weight (and .bias with mlp_bias);
// model.norm.weight [C]; lm_head.weight [V, C] when untied.
class LlamaFamily final : public ModelFamily {
 public:
  std::string_view name() const override { return "llama"; }

  void validate(const ModelConfig& c) const override {
    if (c.intermediate_size <= 0) fail("key 'model.intermediate_size' must be set (positive) for a LLaMA model");
    if (c.head_dim == 0 && c.n_embd % c.n_head != 0) {
      fail("key 'model.n_head' ({}) must divide 'model.n_embd' ({}), or set model.head_dim", c.n_head, c.n_embd);
    }
    if (c.head_size() % 2 != 0) fail("the head size ({}) must be even for rotary embeddings (model.head_dim)", c.head_size());
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

  std::vector<ParamSpec> param_specs(const ModelConfig& config) const override {
    const int64_t c = config.n_embd, f = config.intermediate_size;
    const int64_t q = config.n_head * config.head_size(), kv = kv_width(config);
    // HuggingFace's LLaMA initialisation: every weight normal(0, initializer_range = 0.02), biases 0,
    // norm weights 1.
    const float stddev = 0.02f;
    std::vector<ParamSpec> specs;
    auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
      specs.push_back({name + ".weight", {out, in}, Init::Normal, stddev, true});
      if (bias) specs.push_back({name + ".bias", {out}, Init::Zeros, 0, false});
    };
    auto norm = [&](const std::string& name) { specs.push_back({name + ".weight", {c}, Init::Ones, 0, false}); };
    specs.push_back({"model.embed_tokens.weight", {config.vocab_size, c}, Init::Normal, stddev, true});
    for (int64_t layer = 0; layer < config.n_layer; ++layer) {
      const std::string p = strata::layer_prefix(config, layer);
      norm(p + "input_layernorm");
      linear(p + "self_attn.q_proj", q, c, config.attention_bias);
      linear(p + "self_attn.k_proj", kv, c, config.attention_bias);
      linear(p + "self_attn.v_proj", kv, c, config.attention_bias);
      linear(p + "self_attn.o_proj", c, q, config.attention_bias);
      norm(p + "post_attention_layernorm");
      linear(p + "mlp.gate_proj", f, c, config.mlp_bias);
      linear(p + "mlp.up_proj", f, c, config.mlp_bias);
      linear(p + "mlp.down_proj", c, f, config.mlp_bias);
    }
    norm("model.norm");
    if (!config.tie_word_embeddings) linear("lm_head", config.vocab_size, c, false);
    return specs;
  }

  // Megatron's split: q, k and v projections (and their biases) and the MLP's gate and up
  // column-parallel, so each rank holds whole query and key/value heads (the rotary and the grouped
  // attention run on them locally: the kv heads must split too); o_proj and down_proj row-parallel
  // (their biases added after the sum); the embedding and an untied head vocab-parallel; norms
  // replicated. nn.Linear stores [out, in].
  ShardingPlan sharding_plan() const override {
    const WeightLayout linear = WeightLayout::OutIn;
    return {{
        {"model.layers.*.self_attn.q_proj.*", ShardStyle::ColumnParallel, 1, linear},
        {"model.layers.*.self_attn.k_proj.*", ShardStyle::ColumnParallel, 1, linear},
        {"model.layers.*.self_attn.v_proj.*", ShardStyle::ColumnParallel, 1, linear},
        {"model.layers.*.self_attn.o_proj.weight", ShardStyle::RowParallel, 1, linear},
        {"model.layers.*.mlp.gate_proj.*", ShardStyle::ColumnParallel, 1, linear},
        {"model.layers.*.mlp.up_proj.*", ShardStyle::ColumnParallel, 1, linear},
        {"model.layers.*.mlp.down_proj.weight", ShardStyle::RowParallel, 1, linear},
        {"model.embed_tokens.weight*", ShardStyle::VocabParallel, 1, linear},  // and the LM head's copy
        {"lm_head.weight", ShardStyle::VocabParallel, 1, linear},
    }};
  }

  std::string_view layer_prefix() const override { return "model.layers."; }
  // The embedding is the vocabulary-parallel lookup itself (every rank looks up every position), off the stream.
  ResidualStream residual_stream() const override {
    return {{"input_layernorm", "self_attn.residual", "post_attention_layernorm", "mlp.residual", "model.norm"}, {}};
  }
  std::string tied_embedding(const ModelConfig& config) const override {
    return config.tie_word_embeddings ? "model.embed_tokens.weight" : "";
  }
  int64_t kv_width(const ModelConfig& config) const override { return config.kv_heads() * config.head_size(); }

  int embed(ModelEmitter& e, const ModelConfig& config, int tokens, int, int tp) const override {
    const int table = e.param("model.embed_tokens.weight", {vocab_shard(config, tp), config.n_embd});
    return e.op("embedding", {table, tokens}, {}, "model.embed_tokens");
  }

  int block(ModelEmitter& e, const ModelConfig& config, int x, int positions, const std::string& prefix,
            int tp) const override {
    const int64_t c = config.n_embd, d = config.head_size(), f = config.intermediate_size;
    const int64_t heads = config.n_head / tp, kv_heads = config.kv_heads() / tp;
    int h = rms_norm(e, config, x, prefix + "input_layernorm");
    const std::string attn = prefix + "self_attn.";
    const bool ab = config.attention_bias;
    const int q = rope(e, config, linear(e, h, attn + "q_proj", c, heads * d, ab), positions, attn + "rotary_q");
    const int k = rope(e, config, linear(e, h, attn + "k_proj", c, kv_heads * d, ab), positions, attn + "rotary_k");
    const int v = linear(e, h, attn + "v_proj", c, kv_heads * d, ab);
    const int attended = e.attention("grouped_attention", {q, k, v}, {{"n_head", heads}, {"n_kv_head", kv_heads}},
                                     prefix + "self_attn");
    x = e.op("add", {x, linear(e, attended, attn + "o_proj", heads * d, c, ab)}, {}, prefix + "self_attn.residual");
    h = rms_norm(e, config, x, prefix + "post_attention_layernorm");
    const bool mb = config.mlp_bias;
    const int gate = linear(e, h, prefix + "mlp.gate_proj", c, f / tp, mb);
    const int up = linear(e, h, prefix + "mlp.up_proj", c, f / tp, mb);
    const int act = e.op("swiglu", {gate, up}, {}, prefix + "mlp.act");
    return e.op("add", {x, linear(e, act, prefix + "mlp.down_proj", f / tp, c, mb)}, {}, prefix + "mlp.residual");
  }

  int final_norm(ModelEmitter& e, const ModelConfig& config, int x) const override {
    return rms_norm(e, config, x, "model.norm");
  }

  int lm_head(ModelEmitter& e, const ModelConfig& config, int normed, int tp) const override {
    const std::string table = config.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    const int weight = e.param(table, {vocab_shard(config, tp), config.n_embd});
    return e.op("matmul", {normed, weight}, {{"trans_a", false}, {"trans_b", true}}, "lm_head");
  }

  std::string parameter_of_hf_tensor(const std::string& stored) const override {
    const std::string frequencies = "rotary_emb.inv_freq";  // a buffer in older checkpoints
    if (stored.size() >= frequencies.size() &&
        stored.compare(stored.size() - frequencies.size(), frequencies.size(), frequencies) == 0) {
      return "";
    }
    if (stored == "lm_head.weight" || stored.rfind("model.", 0) == 0) return stored;
    return "model." + stored;
  }

  ModelConfig from_hf_config(const nlohmann::json& hf, const std::string& source) const override {
    return llama_from_hf_config(hf, source);
  }
  nlohmann::json to_hf_config(const ModelConfig& config) const override { return llama_to_hf_config(config); }

 private:
  static int rms_norm(ModelEmitter& e, const ModelConfig& config, int x, const std::string& name) {
    return e.op("rms_norm", {x, e.param(name + ".weight", {config.n_embd})}, {{"eps", config.layer_norm_eps}}, name);
  }
  // nn.Linear: y = x W^T (+ b), W [out, in].
  static int linear(ModelEmitter& e, int x, const std::string& name, int64_t in, int64_t out, bool bias) {
    int y = e.op("matmul", {x, e.param(name + ".weight", {out, in})}, {{"trans_a", false}, {"trans_b", true}}, name);
    if (bias) y = e.op("add", {y, e.param(name + ".bias", {out})}, {}, name + ".bias");
    return y;
  }
  static int rope(ModelEmitter& e, const ModelConfig& config, int x, int positions, const std::string& label) {
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
};

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily family;
  return family;
}

}  // namespace strata
