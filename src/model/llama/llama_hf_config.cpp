#include "model/llama/llama_hf_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/hf_config_reader.h"

namespace strata {

namespace {

// rope_scaling (v4) or rope_parameters (v5): the type under `rope_type` (or v4's older `type`);
// "default" and null mean none.
RopeScaling read_rope_scaling(const HfConfigReader& rope) {
  RopeScaling scaling;
  std::string type = rope.string_or("rope_type", rope.string_or("type", "default"));
  if (type == "default") return scaling;
  if (type != "linear" && type != "llama3") {
    fail("{}: rope type \"{}\" is not supported (\"default\", \"linear\" and \"llama3\" are)", rope.source(), type);
  }
  scaling.type = type;
  scaling.factor = rope.number_or("factor", 1.0);
  if (type == "llama3") {
    scaling.low_freq_factor = rope.number_or("low_freq_factor", scaling.low_freq_factor);
    scaling.high_freq_factor = rope.number_or("high_freq_factor", scaling.high_freq_factor);
    scaling.original_max_positions = rope.integer("original_max_position_embeddings");
  }
  return scaling;
}

}  // namespace

void read_llama_attention_keys(const HfConfigReader& read, ModelConfig& c, double rope_theta_default) {
  c.n_layer = read.integer("num_hidden_layers");
  c.n_head = read.integer("num_attention_heads");
  c.n_kv_head = read.integer_or("num_key_value_heads", c.n_head);
  c.n_embd = read.integer("hidden_size");
  c.vocab_size = read.integer("vocab_size");
  c.max_position_embeddings = read.integer("max_position_embeddings");
  c.block_size = c.max_position_embeddings;
  c.layer_norm_eps = read.number_or("rms_norm_eps", 1e-6);  // LlamaConfig's default
  if (read.has("head_dim")) c.head_dim = read.integer("head_dim");
  c.attention_bias = read.boolean_or("attention_bias", false);
  c.tie_word_embeddings = read.boolean_or("tie_word_embeddings", false);
  const std::string activation = read.string_or("hidden_act", "silu");
  if (activation != "silu") fail("{}: hidden_act \"{}\" is not SwiGLU's \"silu\"", read.source(), activation);
  if (read.has("rope_parameters")) {
    HfConfigReader rope = read.object("rope_parameters");
    c.rope_theta = rope.number_or("rope_theta", read.number_or("rope_theta", rope_theta_default));
    c.rope_scaling = read_rope_scaling(rope);
  } else {
    c.rope_theta = read.number_or("rope_theta", rope_theta_default);
    if (read.has("rope_scaling")) c.rope_scaling = read_rope_scaling(read.object("rope_scaling"));
  }
}

ModelConfig llama_from_hf_config(const nlohmann::json& hf, const std::string& source) {
  HfConfigReader read(hf, source);
  read.expect_model_type("llama");
  ModelConfig c;
  c.family = "llama";
  read_llama_attention_keys(read, c, 10000.0);
  c.intermediate_size = read.integer("intermediate_size");
  c.mlp_bias = read.boolean_or("mlp_bias", false);
  return c;
}

nlohmann::json llama_attention_hf_keys(const ModelConfig& c) {
  nlohmann::json rope_scaling = nullptr;
  if (c.rope_scaling.type == "linear") {
    rope_scaling = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}};
  } else if (c.rope_scaling.type == "llama3") {
    rope_scaling = {{"rope_type", "llama3"},
                    {"factor", c.rope_scaling.factor},
                    {"low_freq_factor", c.rope_scaling.low_freq_factor},
                    {"high_freq_factor", c.rope_scaling.high_freq_factor},
                    {"original_max_position_embeddings", c.rope_scaling.original_max_positions}};
  }
  return {{"vocab_size", c.vocab_size},
          {"hidden_size", c.n_embd},
          {"num_hidden_layers", c.n_layer},
          {"num_attention_heads", c.n_head},
          {"num_key_value_heads", c.kv_heads()},
          {"head_dim", c.head_size()},
          {"hidden_act", "silu"},
          {"max_position_embeddings", c.max_position_embeddings > 0 ? c.max_position_embeddings : c.block_size},
          {"rms_norm_eps", c.layer_norm_eps},
          {"rope_theta", c.rope_theta},
          {"rope_scaling", rope_scaling},
          {"attention_bias", c.attention_bias},
          {"attention_dropout", 0.0},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"initializer_range", 0.02},
          {"torch_dtype", "float32"}};
}

nlohmann::json llama_to_hf_config(const ModelConfig& c) {
  nlohmann::json hf = llama_attention_hf_keys(c);
  hf.update({{"architectures", {"LlamaForCausalLM"}},
             {"model_type", "llama"},
             {"intermediate_size", c.intermediate_size},
             {"mlp_bias", c.mlp_bias}});
  return hf;
}

}  // namespace strata
