#include "model/family.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ranges.h>

#include "core/error.h"
#include "model/gpt2/gpt2_family.h"
#include "model/llama/llama_family.h"
#include "model/moe/moe_family.h"

namespace strata {

namespace {

const std::vector<const ModelFamily*>& families() {
  static const std::vector<const ModelFamily*> all = {&gpt2_family(),      &llama_family(),
                                                              &mixtral_family(),   &qwen3_moe_family(),
                                                              &qwen2_moe_family(), &olmoe_family()};
  return all;
}

}  // namespace

double ModelFamily::training_flops_per_token(const ModelConfig& config) const {
  return 6.0 * static_cast<double>(config.num_parameters()) +
         12.0 * static_cast<double>(config.n_layer * config.n_head * config.head_size() * config.block_size);
}

std::optional<ModelFamily::ExpertSlice> ModelFamily::expert_slice_of_hf_tensor(const std::string&) const {
  return std::nullopt;
}

std::string ModelFamily::hf_tensor_of_expert_slice(const std::string& parameter, int64_t) const {
  fail("{} has no parameters stacked over experts, so none is {}", name(), parameter);
}

bool ModelFamily::stacked_over_experts(const std::string&) const { return false; }

std::vector<std::string> ModelFamily::parameters_of_packed_experts(const std::string&) const { return {}; }

const ModelFamily& model_family(std::string_view name) {
  for (const ModelFamily* family : families()) {
    if (family->name() == name) return *family;
  }
  fail("key 'model.family' must be one of \"{}\", got \"{}\"", fmt::join(model_family_names(), "\", \""), name);
}

std::vector<std::string> model_family_names() {
  std::vector<std::string> names;
  for (const ModelFamily* family : families()) names.emplace_back(family->name());
  return names;
}

ModelConfig model_config_of_hf(const nlohmann::json& hf, const std::string& source) {
  if (!hf.is_object() || !hf.contains("model_type") || !hf["model_type"].is_string()) {
    fail("{}: key 'model_type' is missing or not a string", source);
  }
  const std::string model_type = hf["model_type"].get<std::string>();
  const std::vector<std::string> families = model_family_names();
  if (std::find(families.begin(), families.end(), model_type) == families.end()) {
    fail("{}: model_type \"{}\" is not a family Strata has ({})", source, model_type, fmt::join(families, ", "));
  }
  return model_family(model_type).from_hf_config(hf, source);
}

std::vector<ParamSpec> model_param_specs(const ModelConfig& config) { return model_family(config).param_specs(config); }

std::string layer_prefix(const ModelConfig& config, int64_t layer) {
  return fmt::format("{}{}.", model_family(config).layer_prefix(), layer);
}

}  // namespace strata
