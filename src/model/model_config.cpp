#include "model/model_config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/family.h"

namespace strata {

void ModelConfig::validate() const {
  const ModelFamily& model = model_family(family);
  auto positive = [](const char* key, int64_t value) {
    if (value <= 0) fail("key '{}' must be positive, got {}", key, value);
  };
  positive("model.n_layer", n_layer);
  positive("model.n_head", n_head);
  positive("model.n_embd", n_embd);
  positive("model.vocab_size", vocab_size);
  positive("model.block_size", block_size);
  auto not_negative = [](const char* key, int64_t value) {
    if (value < 0) fail("key '{}' must be positive (or 0 for the default), got {}", key, value);
  };
  not_negative("model.n_kv_head", n_kv_head);
  not_negative("model.head_dim", head_dim);
  not_negative("model.intermediate_size", intermediate_size);
  not_negative("model.max_position_embeddings", max_position_embeddings);
  if (!(layer_norm_eps > 0)) fail("key 'model.layer_norm_eps' must be positive, got {}", layer_norm_eps);
  if (max_position_embeddings > 0 && block_size > max_position_embeddings) {
    fail("key 'model.block_size' ({}) exceeds model.max_position_embeddings ({}), the longest sequence the model "
         "was made for",
         block_size, max_position_embeddings);
  }
  model.validate(*this);
}

std::vector<ModelField> model_fields(ModelConfig& c) {
  return {
      {"family", &c.family},
      {"n_layer", &c.n_layer},
      {"n_head", &c.n_head},
      {"n_embd", &c.n_embd},
      {"vocab_size", &c.vocab_size},
      {"block_size", &c.block_size},
      {"layer_norm_eps", &c.layer_norm_eps},
      {"n_kv_head", &c.n_kv_head},
      {"head_dim", &c.head_dim},
      {"intermediate_size", &c.intermediate_size},
      {"max_position_embeddings", &c.max_position_embeddings},
      {"rope_theta", &c.rope_theta},
      {"rope_scaling", &c.rope_scaling.type, "/rope_scaling/type"},
      {"rope_factor", &c.rope_scaling.factor, "/rope_scaling/factor"},
      {"rope_low_freq_factor", &c.rope_scaling.low_freq_factor, "/rope_scaling/low_freq_factor"},
      {"rope_high_freq_factor", &c.rope_scaling.high_freq_factor, "/rope_scaling/high_freq_factor"},
      {"rope_original_max_positions", &c.rope_scaling.original_max_positions, "/rope_scaling/original_max_positions"},
      {"tie_word_embeddings", &c.tie_word_embeddings},
      {"attention_bias", &c.attention_bias},
      {"mlp_bias", &c.mlp_bias},
      {"num_experts", &c.num_experts, nullptr, true},
      {"num_experts_per_tok", &c.num_experts_per_tok, nullptr, true},
      {"moe_intermediate_size", &c.moe_intermediate_size, nullptr, true},
      {"shared_expert_intermediate_size", &c.shared_expert_intermediate_size, nullptr, true},
      {"norm_topk_prob", &c.norm_topk_prob, nullptr, true},
      {"router_aux_loss_coef", &c.router_aux_loss_coef, nullptr, true},
      {"router_z_loss_coef", &c.router_z_loss_coef, nullptr, true},
      {"capacity_factor", &c.capacity_factor, nullptr, true},
  };
}

nlohmann::json model_config_json(const ModelConfig& config) {
  ModelConfig copy = config, defaults;  // model_fields hands out pointers that could change them
  const std::vector<ModelField> fields = model_fields(copy), default_fields = model_fields(defaults);
  nlohmann::json json = nlohmann::json::object();
  for (size_t i = 0; i < fields.size(); ++i) {
    std::visit(
        [&](auto* value) {
          const bool at_default = *value == *std::get<decltype(value)>(default_fields[i].value);
          if (fields[i].written_only_when_set && at_default) return;
          json[nlohmann::json::json_pointer(fields[i].json_pointer())] = *value;
        },
        fields[i].value);
  }
  return json;
}

void ModelConfig::expect_dense(const char* family_title) const {
  const ModelConfig dense;
  const std::pair<const char*, bool> set[] = {
      {"num_experts", num_experts != dense.num_experts},
      {"num_experts_per_tok", num_experts_per_tok != dense.num_experts_per_tok},
      {"moe_intermediate_size", moe_intermediate_size != dense.moe_intermediate_size},
      {"shared_expert_intermediate_size", shared_expert_intermediate_size != dense.shared_expert_intermediate_size},
      {"norm_topk_prob", norm_topk_prob != dense.norm_topk_prob},
      {"router_aux_loss_coef", router_aux_loss_coef != dense.router_aux_loss_coef},
      {"router_z_loss_coef", router_z_loss_coef != dense.router_z_loss_coef},
      {"capacity_factor", capacity_factor != dense.capacity_factor}};
  for (const auto& [key, differs] : set) {
    if (differs) fail("key 'model.{}' is a mixture-of-experts setting, not a {} one (model.family = \"{}\")", key,
                      family_title, family);
  }
}

int64_t ModelConfig::num_parameters() const {
  // Every layer has the same parameters: count one- and two-layer models, not n_layer layers' specs
  // (a config of a billion layers must be refused for its size, not build the list).
  auto count_with_layers = [this](int64_t layers) {
    ModelConfig shallow = *this;
    shallow.n_layer = layers;
    int64_t count = 0;
    for (const ParamSpec& spec : model_param_specs(shallow)) count += shape_numel(spec.shape);
    return count;
  };
  const int64_t one = count_with_layers(1);
  return one + (n_layer - 1) * (count_with_layers(2) - one);
}

}  // namespace strata
