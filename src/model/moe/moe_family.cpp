#include "model/moe/moe_family.h"

#include <cctype>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/moe/moe_block.h"
#include "model/moe/moe_hf_config.h"

namespace strata {

namespace {

// model.embed_tokens.weight [V, C]; per layer LLaMA's attention tensors (Qwen3: and self_attn.q_norm,
// k_norm [head_dim]), then the sparse block's router and stacked experts (moe_block.h); model.norm.weight
// [C]; lm_head.weight [V, C] when untied.
class MoeFamily final : public ModelFamily {
 public:
  explicit MoeFamily(MoeFlavour flavour) : flavour_(std::move(flavour)) {}

  std::string_view name() const override { return flavour_.family; }

  void validate(const ModelConfig& c) const override {
    llama::validate_attention(c);
    validate_moe_keys(c, flavour_);
  }

  std::vector<ParamSpec> param_specs(const ModelConfig& config) const override {
    const int64_t c = config.n_embd;
    std::vector<ParamSpec> specs;
    llama::add_linear_specs(specs, "model.embed_tokens", config.vocab_size, c, false);
    for (int64_t layer = 0; layer < config.n_layer; ++layer) {
      const std::string p = strata::layer_prefix(config, layer);
      llama::add_attention_specs(specs, config, p, flavour_.attention);
      add_sparse_moe_specs(specs, config, flavour_, p);
    }
    specs.push_back({"model.norm.weight", {c}, Init::Ones, 0, false});
    if (!config.tie_word_embeddings) llama::add_linear_specs(specs, "lm_head", config.vocab_size, c, false);
    return specs;
  }

  // Megatron's split of the attention, as LLaMA's; the router and the experts stay whole on every
  // tensor-parallel rank: the experts split by expert parallelism (whole experts per rank).
  ShardingPlan sharding_plan() const override {
    return {.rules = llama::attention_sharding_rules(), .expert_stacked = {"*." + experts_marker() + "*"}};
  }

  std::string_view layer_prefix() const override { return "model.layers."; }
  // Besides LLaMA's stream, the ops that multiply each position by replicated weights (the router's gate, a
  // shared expert and its gate) and the sum that adds the shared expert: sequence parallelism keeps them split
  // (parallel/tensor_parallel.cpp). The router, the permutation, the experts and the combine read every position
  // and run whole on every tensor-parallel rank.
  ResidualStream residual_stream() const override {
    ResidualStream stream = llama::residual_stream();
    const std::string block = flavour_.block;
    stream.ops.push_back(block + "gate");
    // The sum of the normed input's gradients (the gate's and the permutation's) runs on this rank's block.
    stream.gradient_ops.push_back(block + "dispatch:xs.grad_sum");
    if (flavour_.shared_expert) {
      for (const char* op : {"shared_expert.gate_proj", "shared_expert.up_proj", "shared_expert.act",
                             "shared_expert.down_proj", "shared_expert_gate", "shared_gate", "shared_expert.sum"}) {
        stream.ops.push_back(block + op);
      }
    }
    return stream;
  }
  std::string tied_embedding(const ModelConfig& config) const override {
    return config.tie_word_embeddings ? "model.embed_tokens.weight" : "";
  }
  int64_t kv_width(const ModelConfig& config) const override { return config.kv_heads() * config.head_size(); }

  // Only a token's k experts work on it: the dense count less the other experts' weights.
  double training_flops_per_token(const ModelConfig& config) const override {
    const double idle_experts = static_cast<double>(config.num_experts - config.num_experts_per_tok);
    const double expert_weights = 3.0 * static_cast<double>(config.n_embd * config.moe_intermediate_size);
    return ModelFamily::training_flops_per_token(config) -
           6.0 * static_cast<double>(config.n_layer) * idle_experts * expert_weights;
  }

  int embed(ModelEmitter& e, const ModelConfig& config, int tokens, int) const override {
    return llama::embed(e, config, tokens);
  }

  int block(ModelEmitter& e, const ModelConfig& config, int x, int positions,
            const std::string& prefix) const override {
    const int h = llama::rms_norm(e, config, x, prefix + "input_layernorm");
    const int attended = llama::self_attention(e, config, h, positions, prefix, flavour_.attention);
    x = e.op("add", {x, attended}, {}, prefix + "self_attn.residual");
    const int normed = llama::rms_norm(e, config, x, prefix + "post_attention_layernorm");
    return e.op("add", {x, sparse_moe_block(e, config, flavour_, normed, prefix)}, {}, prefix + "mlp.residual");
  }

  int final_norm(ModelEmitter& e, const ModelConfig& config, int x) const override {
    return llama::rms_norm(e, config, x, "model.norm");
  }

  int lm_head(ModelEmitter& e, const ModelConfig& config, int normed) const override {
    return llama::lm_head(e, config, normed);
  }

  std::string parameter_of_hf_tensor(const std::string& stored) const override {
    if (stored == "lm_head.weight" || stored.rfind("model.", 0) == 0) return stored;
    return "model." + stored;
  }

  // model.layers.{i}.<block>experts.{e}.<proj>.weight: slice e of <block>experts.<proj>.weight.
  std::optional<ExpertSlice> expert_slice_of_hf_tensor(const std::string& stored) const override {
    const std::string name = parameter_of_hf_tensor(stored);
    const size_t at = name.find(experts_marker());
    if (at == std::string::npos) return std::nullopt;
    const size_t start = at + experts_marker().size();
    size_t end = start;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    if (end == start || end - start > 9 || end == name.size() || name[end] != '.') return std::nullopt;
    return ExpertSlice{name.substr(0, start) + name.substr(end + 1), std::stoll(name.substr(start, end - start))};
  }

  std::string hf_tensor_of_expert_slice(const std::string& parameter, int64_t expert) const override {
    STRATA_CHECK(stacked_over_experts(parameter), "{} is not a stacked expert parameter", parameter);
    const size_t start = parameter.find(experts_marker()) + experts_marker().size();
    return parameter.substr(0, start) + std::to_string(expert) + "." + parameter.substr(start);
  }

  std::vector<std::string> parameters_of_packed_experts(const std::string& stored) const override {
    const std::string name = parameter_of_hf_tensor(stored);
    const size_t at = name.find(experts_marker());
    if (at == std::string::npos) return {};
    const std::string experts = name.substr(0, at + experts_marker().size()), packed = name.substr(experts.size());
    auto stacked = [&](const std::string& projection) { return experts + projection + ".weight"; };
    if (packed == "gate_up_proj") return {stacked(flavour_.gate_proj), stacked(flavour_.up_proj)};
    if (packed == "down_proj") return {stacked(flavour_.down_proj)};
    return {};
  }

  bool stacked_over_experts(const std::string& parameter) const override {
    return parameter.find(experts_marker()) != std::string::npos;
  }

  ModelConfig from_hf_config(const nlohmann::json& hf, const std::string& source) const override {
    return moe_from_hf_config(hf, source, flavour_);
  }
  nlohmann::json to_hf_config(const ModelConfig& config) const override { return moe_to_hf_config(config, flavour_); }

 private:
  std::string experts_marker() const { return flavour_.block + "experts."; }  // the stacked parameters' infix

  MoeFlavour flavour_;
};

}  // namespace

const ModelFamily& mixtral_family() {
  static const MoeFamily family({.family = "mixtral",
                                 .title = "Mixtral",
                                 .architecture = "MixtralForCausalLM",
                                 .block = "block_sparse_moe.",
                                 .gate_proj = "w1",
                                 .up_proj = "w3",
                                 .down_proj = "w2",
                                 .experts_key = "num_local_experts",
                                 .expert_width_key = "intermediate_size",
                                 .attention = {},
                                 .always_norm_topk = true,
                                 .rope_theta_default = 1e6});
  return family;
}

namespace {

// The names Qwen's and OLMoE's MoE blocks share: mlp.gate, mlp.experts.{e}.gate_proj/up_proj/down_proj,
// num_experts in config.json.
MoeFlavour mlp_experts_flavour(std::string family, std::string title, std::string architecture,
                               std::string expert_width_key) {
  return {.family = std::move(family),
          .title = std::move(title),
          .architecture = std::move(architecture),
          .block = "mlp.",
          .gate_proj = "gate_proj",
          .up_proj = "up_proj",
          .down_proj = "down_proj",
          .experts_key = "num_experts",
          .expert_width_key = std::move(expert_width_key)};
}

}  // namespace

const ModelFamily& qwen3_moe_family() {
  static const MoeFamily family([] {
    MoeFlavour flavour = mlp_experts_flavour("qwen3_moe", "Qwen3-MoE", "Qwen3MoeForCausalLM", "moe_intermediate_size");
    flavour.attention.qk_norm = llama::QkNorm::PerHead;
    flavour.qwen_layout = true;
    return flavour;
  }());
  return family;
}

const ModelFamily& qwen2_moe_family() {
  static const MoeFamily family([] {
    MoeFlavour flavour = mlp_experts_flavour("qwen2_moe", "Qwen2-MoE", "Qwen2MoeForCausalLM", "moe_intermediate_size");
    flavour.attention.o_proj_bias = false;
    flavour.qkv_bias = true;
    flavour.qwen_layout = true;
    flavour.shared_expert = true;
    return flavour;
  }());
  return family;
}

const ModelFamily& olmoe_family() {
  static const MoeFamily family([] {
    MoeFlavour flavour = mlp_experts_flavour("olmoe", "OLMoE", "OlmoeForCausalLM", "intermediate_size");
    flavour.attention.qk_norm = llama::QkNorm::Whole;
    return flavour;
  }());
  return family;
}

}  // namespace strata
