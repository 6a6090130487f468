#include "model/moe/moe_hf_config.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/hf_config_reader.h"
#include "model/llama/llama_hf_config.h"

namespace strata {

namespace {

void expect_unset(bool set, const char* key, const MoeFlavour& flavour, const char* why) {
  if (set) fail("key 'model.{}' is not a {} setting ({})", key, flavour.title, why);
}

void expect_non_negative(double value, const char* key) {
  if (!(value >= 0) || !std::isfinite(value)) fail("key 'model.{}' must be 0 or positive, got {}", key, value);
}

// The Qwen keys that would make some layers dense or the attention slide: Strata has every layer sparse.
void read_qwen_layout(const HfConfigReader& read, const nlohmann::json& hf, ModelConfig& c) {
  if (read.integer_or("decoder_sparse_step", 1) != 1) {
    fail("{}: decoder_sparse_step {} makes some layers dense; Strata's {} has every layer sparse (1)", read.source(),
         read.integer_or("decoder_sparse_step", 1), c.family);
  }
  if (hf.contains("mlp_only_layers") && !(hf["mlp_only_layers"].is_array() && hf["mlp_only_layers"].empty()) &&
      !hf["mlp_only_layers"].is_null()) {
    fail("{}: mlp_only_layers {} makes those layers dense; Strata's {} has every layer sparse ([])", read.source(),
         hf["mlp_only_layers"].dump(), c.family);
  }
  if (read.boolean_or("use_sliding_window", false)) {
    fail("{}: use_sliding_window is true; Strata's attention is full causal attention", read.source());
  }
  c.intermediate_size = read.integer_or("intermediate_size", 0);  // the dense layers' width: kept for the way back
}

// What Strata does not run: random routing, a sliding window shorter than the model's positions, clipped q/k/v.
void refuse_unsupported(const HfConfigReader& read, const MoeFlavour& flavour, const ModelConfig& c) {
  if (read.number_or("router_jitter_noise", 0.0) != 0.0) {
    fail("{}: router_jitter_noise {} makes routing random; Strata routes deterministically (0)", read.source(),
         read.number_or("router_jitter_noise", 0.0));
  }
  if (!flavour.qwen_layout && read.has("sliding_window") && read.integer("sliding_window") < c.max_position_embeddings) {
    fail("{}: sliding_window {} is shorter than max_position_embeddings; Strata's attention is full causal attention",
         read.source(), read.integer("sliding_window"));
  }
  if (read.has("clip_qkv")) fail("{}: clip_qkv is set; Strata does not clip q, k and v (null)", read.source());
}

}  // namespace

void validate_moe_keys(const ModelConfig& c, const MoeFlavour& flavour) {
  if (c.num_experts <= 0) fail("key 'model.num_experts' must be set (positive) for a {} model", flavour.title);
  if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_experts) {
    fail("key 'model.num_experts_per_tok' must be in [1, {}] (model.num_experts), got {}", c.num_experts,
         c.num_experts_per_tok);
  }
  if (c.moe_intermediate_size <= 0) {
    fail("key 'model.moe_intermediate_size' must be set (positive) for a {} model: each expert's hidden width",
         flavour.title);
  }
  if (flavour.shared_expert && c.shared_expert_intermediate_size <= 0) {
    fail("key 'model.shared_expert_intermediate_size' must be set (positive) for a {} model: its shared expert's "
         "width", flavour.title);
  }
  expect_unset(!flavour.shared_expert && c.shared_expert_intermediate_size != 0, "shared_expert_intermediate_size",
               flavour, "no shared expert");
  if (flavour.qkv_bias && !c.attention_bias) {
    fail("key 'model.attention_bias' must be true for a {} model: its q, k and v projections have biases",
         flavour.title);
  }
  expect_unset(c.mlp_bias, "mlp_bias", flavour, "its experts have no biases");
  expect_unset(!flavour.qwen_layout && c.intermediate_size != 0, "intermediate_size", flavour,
               "its experts' width is model.moe_intermediate_size");
  expect_non_negative(c.router_aux_loss_coef, "router_aux_loss_coef");
  expect_non_negative(c.router_z_loss_coef, "router_z_loss_coef");
  expect_non_negative(c.capacity_factor, "capacity_factor");
}

ModelConfig moe_from_hf_config(const nlohmann::json& hf, const std::string& source, const MoeFlavour& flavour) {
  HfConfigReader read(hf, source);
  read.expect_model_type(flavour.family);
  ModelConfig c;
  c.family = flavour.family;
  read_llama_attention_keys(read, c, flavour.rope_theta_default);
  if (flavour.qkv_bias) c.attention_bias = true;  // Qwen2MoeAttention's q/k/v biases are not configurable
  c.num_experts = read.integer(flavour.experts_key);
  c.num_experts_per_tok = read.integer("num_experts_per_tok");
  c.moe_intermediate_size = read.integer(flavour.expert_width_key);
  if (!flavour.always_norm_topk) c.norm_topk_prob = read.boolean_or("norm_topk_prob", false);
  if (flavour.shared_expert) c.shared_expert_intermediate_size = read.integer("shared_expert_intermediate_size");
  if (flavour.qwen_layout) read_qwen_layout(read, hf, c);
  refuse_unsupported(read, flavour, c);
  if (read.boolean_or("output_router_logits", false)) {
    c.router_aux_loss_coef = read.number_or("router_aux_loss_coef", 0.001);
  }
  return c;
}

nlohmann::json moe_to_hf_config(const ModelConfig& c, const MoeFlavour& flavour) {
  nlohmann::json hf = llama_attention_hf_keys(c);
  hf.update({{"architectures", {flavour.architecture}},
             {"model_type", flavour.family},
             {flavour.experts_key, c.num_experts},
             {"num_experts_per_tok", c.num_experts_per_tok},
             {flavour.expert_width_key, c.moe_intermediate_size},
             {"output_router_logits", c.router_aux_loss_coef > 0},
             {"router_aux_loss_coef", c.router_aux_loss_coef},
             {"router_jitter_noise", 0.0}});
  if (!flavour.always_norm_topk) hf["norm_topk_prob"] = c.norm_topk_prob;
  if (flavour.shared_expert) hf["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
  if (flavour.qwen_layout) {
    hf.update({{"decoder_sparse_step", 1},
               {"mlp_only_layers", nlohmann::json::array()},
               {"intermediate_size", c.intermediate_size},
               {"use_sliding_window", false}});
  } else {
    hf["sliding_window"] = nullptr;
    hf["clip_qkv"] = nullptr;
  }
  return hf;
}

}  // namespace strata
