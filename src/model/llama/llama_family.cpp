#include "model/llama/llama_family.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/hf_config_reader.h"
#include "model/llama/llama_hf_config.h"
#include "model/llama/llama_layers.h"

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
    llama::validate_attention(c);
    c.expect_dense("LLaMA");
  }

  std::vector<ParamSpec> param_specs(const ModelConfig& config) const override {
    const int64_t c = config.n_embd, f = config.intermediate_size;
    // HuggingFace's LLaMA initialisation: every weight normal(0, initializer_range = 0.02), biases 0,
    // norm weights 1.
    std::vector<ParamSpec> specs;
    llama::add_linear_specs(specs, "model.embed_tokens", config.vocab_size, c, false);
    for (int64_t layer = 0; layer < config.n_layer; ++layer) {
      const std::string p = strata::layer_prefix(config, layer);
      llama::add_attention_specs(specs, config, p, {});
      llama::add_linear_specs(specs, p + "mlp.gate_proj", f, c, config.mlp_bias);
      llama::add_linear_specs(specs, p + "mlp.up_proj", f, c, config.mlp_bias);
      llama::add_linear_specs(specs, p + "mlp.down_proj", c, f, config.mlp_bias);
    }
    specs.push_back({"model.norm.weight", {c}, Init::Ones, 0, false});
    if (!config.tie_word_embeddings) llama::add_linear_specs(specs, "lm_head", config.vocab_size, c, false);
    return specs;
  }

  // Megatron's split: the attention's (llama_layers.h), the MLP's gate and up column-parallel, down_proj
  // row-parallel (its bias added after the sum); norms replicated.
  ShardingPlan sharding_plan() const override {
    const WeightLayout linear = WeightLayout::OutIn;
    std::vector<ShardRule> rules = llama::attention_sharding_rules();
    rules.push_back({"model.layers.*.mlp.gate_proj.*", ShardStyle::ColumnParallel, 1, linear});
    rules.push_back({"model.layers.*.mlp.up_proj.*", ShardStyle::ColumnParallel, 1, linear});
    rules.push_back({"model.layers.*.mlp.down_proj.weight", ShardStyle::RowParallel, 1, linear});
    return {rules};
  }

  std::string_view layer_prefix() const override { return "model.layers."; }
  ResidualStream residual_stream() const override { return llama::residual_stream(); }
  std::string tied_embedding(const ModelConfig& config) const override {
    return config.tie_word_embeddings ? "model.embed_tokens.weight" : "";
  }
  int64_t kv_width(const ModelConfig& config) const override { return config.kv_heads() * config.head_size(); }

  int embed(ModelEmitter& e, const ModelConfig& config, int tokens, int) const override {
    return llama::embed(e, config, tokens);
  }

  int block(ModelEmitter& e, const ModelConfig& config, int x, int positions,
            const std::string& prefix) const override {
    const int64_t c = config.n_embd, f = config.intermediate_size;
    const int h = llama::rms_norm(e, config, x, prefix + "input_layernorm");
    const int attended = llama::self_attention(e, config, h, positions, prefix, {});
    x = e.op("add", {x, attended}, {}, prefix + "self_attn.residual");
    const int normed = llama::rms_norm(e, config, x, prefix + "post_attention_layernorm");
    const bool mb = config.mlp_bias;
    const int gate = llama::linear(e, normed, prefix + "mlp.gate_proj", c, f, mb);
    const int up = llama::linear(e, normed, prefix + "mlp.up_proj", c, f, mb);
    const int act = e.op("swiglu", {gate, up}, {}, prefix + "mlp.act");
    return e.op("add", {x, llama::linear(e, act, prefix + "mlp.down_proj", f, c, mb)}, {},
                prefix + "mlp.residual");
  }

  int final_norm(ModelEmitter& e, const ModelConfig& config, int x) const override {
    return llama::rms_norm(e, config, x, "model.norm");
  }

  int lm_head(ModelEmitter& e, const ModelConfig& config, int normed) const override {
    return llama::lm_head(e, config, normed);
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

};

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily family;
  return family;
}

}  // namespace strata
