#include "scan/model_config.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_fields.h"

namespace strata {

namespace {

constexpr std::string_view kWhere = "the scanner's output: model";

// A TOML value for a [model] key; a float keeps a decimal point so it reads back as a float.
std::string toml_value(const nlohmann::json& value, const std::string& key) {
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_number_integer()) return fmt::format("{}", value.get<int64_t>());
  if (value.is_number_float()) {
    std::string text = fmt::format("{}", value.get<double>());
    if (text.find_first_of(".eEni") == std::string::npos) text += ".0";
    return text;
  }
  if (value.is_string()) return nlohmann::json(value.get<std::string>()).dump();
  fail("{}.keys.{}: {} is not a number, a bool or a string", kWhere, key, value.dump());
}

std::string config_text(const ModelCheck& check, const nlohmann::json& keys, const std::string& backend,
                        const std::string& precision) {
  std::string text = fmt::format(
      "# Written by strata scan: the model of {}.\n# {}.\n# Keys marked 'assumed' were not in the project: "
      "defaults of the family (transformers' or Strata's). Check them.\n[model]\n",
      check.evidence, check.reason);
  text += fmt::format("family = {}\n", toml_value(json_required(keys, "family", kWhere), "family"));
  for (const auto& [key, value] : keys.items()) {
    if (key == "family") continue;
    const bool assumed = std::find(check.assumed.begin(), check.assumed.end(), key) != check.assumed.end();
    text += fmt::format("{} = {}{}\n", key, toml_value(value, key), assumed ? "  # assumed" : "");
  }
  text += fmt::format(
      "\n[data]\n# Your corpus as token shards: strata data prepare TEXT... --out data/corpus\ndir = \"data/corpus\"\n"
      "\n[ops]\nbackend = \"{}\"\n\n[precision]\ncompute = \"{}\"\n",
      backend, precision);
  return text;
}

std::vector<std::string> string_list(const nlohmann::json& model, std::string_view key) {
  std::vector<std::string> items;
  json_for_each_item(model, key, kWhere, [&](const nlohmann::json& item, const std::string& where) {
    if (!item.is_string()) fail("{}: must be a string", where);
    items.push_back(item.get<std::string>());
  });
  return items;
}

// The config's op coverage; a config Strata refuses is recorded with its error, not thrown.
void judge_config(ModelCheck& check) {
  try {
    const TrainConfig config = parse_train_config(check.config_toml, "the emitted config", {});
    check.coverage = config_op_coverage(config);
  } catch (const Error& error) {
    check.config_error = error.what();
  }
}

}  // namespace

std::string project_precision(const ScanFindings& scan) {
  bool f16 = false;
  for (const Finding& finding : scan.findings) {
    if (finding.category != "precision") continue;
    if (finding.api.find("bfloat16") != std::string::npos) return "bf16";
    for (std::string_view habit : {"float16", "torch.half", ".half()", "GradScaler"}) {
      if (finding.api.find(habit) != std::string::npos) f16 = true;
    }
  }
  return f16 ? "f16" : "f32";
}

ModelCheck check_model(const nlohmann::json& model, const std::string& backend, const std::string& precision) {
  ModelCheck check;
  check.found = json_bool(model, "found", false, kWhere);
  check.reason = json_string(model, "reason", kWhere);
  if (!check.found) return check;
  check.evidence = json_string(model, "evidence", kWhere);
  check.also_found = string_list(model, "also_found");
  check.supported = json_bool(model, "supported", false, kWhere);
  if (!check.supported) return check;
  check.family = json_string(model, "family", kWhere);
  check.assumed = string_list(model, "assumed");
  if (model.contains("missing")) check.missing = string_list(model, "missing");
  const nlohmann::json& keys = json_required(model, "keys", kWhere);
  expect_json_object(keys, fmt::format("{}.keys", kWhere));
  check.config_toml = config_text(check, keys, backend, precision);
  judge_config(check);
  return check;
}

}  // namespace strata
