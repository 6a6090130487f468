#include "train/config.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>
#include <variant>

#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "backends/backends.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/key_checks.h"
#include "core/toml_reader.h"
#include "model/hf_model_dir.h"

namespace strata {

namespace {

using FieldRef = TomlReader::Target;

struct Field {
  std::string key;
  FieldRef ref;
};

std::vector<Field> fields(TrainConfig& c) {
  std::vector<Field> all;
  for (const ModelField& field : model_fields(c.model)) {
    std::visit([&](auto* value) { all.push_back({std::string("model.") + field.key, value}); }, field.value);
  }
  std::vector<Field> rest = {
      {"model.init_from", &c.init_from},
      {"data.dir", &c.data_dir},
      {"data.train", &c.train_shards},
      {"data.val", &c.val_shards},
      {"ops.backend", &c.backend},
      {"ops.fallback", &c.fallback},
      {"ops.device", &c.device},
      {"ops.emulate", &c.emulate},
      {"ops.threads", &c.threads},
      {"ops.fuse", &c.fuse},
      {"ops.sum_order", &c.sum_order},
      {"train.seed", &c.seed},
      {"train.batch_size", &c.batch_size},
      {"train.global_batch", &c.global_batch},
      {"train.steps", &c.steps},
      {"train.exit_at_step", &c.exit_at_step},
      {"train.lr", &c.lr},
      {"train.lr_min", &c.lr_min},
      {"train.warmup_steps", &c.warmup_steps},
      {"train.weight_decay", &c.weight_decay},
      {"train.beta1", &c.beta1},
      {"train.beta2", &c.beta2},
      {"train.adam_eps", &c.adam_eps},
      {"train.grad_clip", &c.grad_clip},
      {"train.max_skipped_steps", &c.max_skipped_steps},
      {"train.val_every", &c.val_every},
      {"train.val_batches", &c.val_batches},
      {"parallel.plan", &c.plan},
      {"parallel.cluster", &c.cluster},
      {"precision.compute", &c.precision},
      {"precision.fp32_ops", &c.fp32_ops},
      {"precision.loss_scale", &c.loss_scale},
      {"precision.growth_interval", &c.loss_scale_growth_interval},
      {"precision.growth", &c.loss_scale_growth},
      {"precision.backoff", &c.loss_scale_backoff},
      {"train.recompute", &c.recompute},
      {"checkpoint.dir", &c.run_dir},
      {"checkpoint.every", &c.checkpoint_every},
      {"checkpoint.keep", &c.checkpoint_keep},
      {"checkpoint.resume", &c.resume},
  };
  all.insert(all.end(), rest.begin(), rest.end());
  // The dimensions' own keys (parallel/parallel_settings.h), each declared with its registration.
  for (auto& [key, value] : c.keys()) all.push_back({key, value});
  return all;
}

// "train.lr" -> {"train", "lr"}: every config key is one section deep.
std::pair<std::string, std::string> split_key(const std::string& key) {
  auto dot = key.find('.');
  return {key.substr(0, dot), key.substr(dot + 1)};
}

std::map<std::string, std::set<std::string>> keys_by_section(const std::vector<Field>& fields) {
  std::map<std::string, std::set<std::string>> sections;
  for (const Field& field : fields) {
    auto [section, name] = split_key(field.key);
    sections[section].insert(name);
  }
  return sections;
}

// `others`: tables the file may hold for other commands, read (strictly) by them.
void reject_unknown_keys(const TomlReader& root, const std::map<std::string, std::set<std::string>>& sections,
                         const std::set<std::string>& others = {}) {
  std::set<std::string> names = others;
  for (const auto& [section, keys] : sections) names.insert(section);
  root.only(names);
  for (const auto& [section, keys] : sections) root.table(section, false).only(keys);
}

void assign(const Field& field, const TomlReader& section, const std::string& name) {
  section.read_into(name, field.ref);
}

// `--set train.lr=3e-4`: the value is read as a TOML value, or as a bare
// string when it is not one (so paths need no quotes).
void apply_override(toml::table& table, const std::string& assignment) {
  auto equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    fail("--set expects key=value, got '{}'", assignment);
  }
  std::string key = assignment.substr(0, equals);
  std::string value = assignment.substr(equals + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", value}};
  }
  toml::table* section = &table;
  std::stringstream path(key);
  std::vector<std::string> parts;
  for (std::string part; std::getline(path, part, '.');) parts.push_back(part);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (!section->contains(parts[i])) section->insert(parts[i], toml::table{});
    section = (*section)[parts[i]].as_table();
    if (section == nullptr) fail("--set {}: '{}' is not a section", key, parts[i]);
  }
  section->insert_or_assign(parts.back(), *parsed.get("v"));
}

}  // namespace

// In the order the keys' checks run: the first impossible value is the one named.
void TrainConfig::validate() const {
  model.validate();
  validate_training();
  validate_parallel();
  validate_precision_and_ops();
}

void TrainConfig::validate_training() const {
  check_positive("train.batch_size", batch_size);
  check_positive("train.global_batch", global_batch);
  if (global_batch % batch_size != 0) {
    fail("key 'train.batch_size' ({}) must divide 'train.global_batch' ({})", batch_size, global_batch);
  }
  check_positive("train.steps", steps);
  check_non_negative("train.exit_at_step", exit_at_step);
  if (exit_at_step > steps) {
    fail("key 'train.exit_at_step' ({}) is past the run's last step, train.steps = {}", exit_at_step, steps);
  }
  check_positive("train.lr", lr);
  check_non_negative("train.lr_min", lr_min);
  if (lr_min > lr) fail("key 'train.lr_min' ({}) must not exceed 'train.lr' ({})", lr_min, lr);
  check_non_negative("train.warmup_steps", warmup_steps);
  check_non_negative("train.weight_decay", weight_decay);
  if (!(beta1 >= 0 && beta1 < 1)) fail("key 'train.beta1' must be in [0, 1), got {}", beta1);
  if (!(beta2 >= 0 && beta2 < 1)) fail("key 'train.beta2' must be in [0, 1), got {}", beta2);
  check_positive("train.adam_eps", adam_eps);
  check_non_negative("train.grad_clip", grad_clip);
  check_non_negative("train.max_skipped_steps", max_skipped_steps);
  check_non_negative("train.val_every", val_every);
  check_positive("train.val_batches", val_batches);
  check_non_negative("ops.threads", threads);
  check_non_negative("checkpoint.every", checkpoint_every);
  check_non_negative("checkpoint.keep", checkpoint_keep);
  if (train_shards.empty() != val_shards.empty()) {
    fail("keys 'data.train' and 'data.val' go together: set both (shard paths or globs) or neither (data.dir)");
  }
  if (data_dir.empty() && train_shards.empty()) fail("key 'data.dir' must not be empty");
  if (run_dir.empty()) fail("key 'checkpoint.dir' must not be empty");
}

void TrainConfig::validate_parallel() const {
  if (plan != "manual" && plan != "auto") fail("key 'parallel.plan' must be \"manual\" or \"auto\", got \"{}\"", plan);
  if (plan == "auto" && cluster.empty()) {
    fail("key 'parallel.cluster' must name a cluster file (a preset in configs/clusters/, or the one "
         "`strata calibrate` writes) when parallel.plan = \"auto\"");
  }
  check(model);
}

void TrainConfig::validate_precision_and_ops() const {
  parse_precision_mode(precision, "key 'precision.compute'");
  precision_policy();  // validates precision.fp32_ops
  check_positive("precision.loss_scale", loss_scale);
  check_positive("precision.growth_interval", loss_scale_growth_interval);
  check_finite("precision.growth", loss_scale_growth);
  if (!(loss_scale_growth > 1)) fail("key 'precision.growth' must exceed 1, got {}", loss_scale_growth);
  if (!(loss_scale_backoff > 0 && loss_scale_backoff < 1)) {
    fail("key 'precision.backoff' must be in (0, 1), got {}", loss_scale_backoff);
  }
  if (recompute != "none" && recompute != "selective" && recompute != "full") {
    fail("key 'train.recompute' must be \"none\", \"selective\" or \"full\", got \"{}\"", recompute);
  }
  if (const std::vector<std::string> known = backend_names(); std::find(known.begin(), known.end(), backend) == known.end()) {
    fail("key 'ops.backend' must be one of {}, got \"{}\"", fmt::format("\"{}\"", fmt::join(known, "\", \"")), backend);
  }
  if (fallback != "allow" && fallback != "warn" && fallback != "error") {
    fail("key 'ops.fallback' must be \"allow\", \"warn\" or \"error\", got \"{}\"", fallback);
  }
  summation_order();  // validates ops.sum_order
}

ModelBuildOptions model_build_options(const TrainConfig& config, bool training) {
  return {.precision = config.precision_policy(),
          .recompute = training ? parse_recompute_mode(config.recompute, "train.recompute") : RecomputeMode::None,
          .fuse = config.fuse};
}

PrecisionPolicy TrainConfig::precision_policy() const {
  return PrecisionPolicy::parse(precision, fp32_ops, "precision.fp32_ops");
}

SumOrder TrainConfig::summation_order() const { return parse_sum_order(sum_order, "ops.sum_order"); }

TrainConfig parse_train_config(const std::string& toml_text, const std::string& source,
                               const std::vector<std::string>& overrides) {
  TomlReader from_file = TomlReader::parse(toml_text, source);
  toml::table assignments;
  for (const std::string& assignment : overrides) apply_override(assignments, assignment);
  TomlReader from_set(std::move(assignments), "--set");
  TrainConfig config;
  std::vector<Field> known = fields(config);
  std::map<std::string, std::set<std::string>> sections = keys_by_section(known);
  reject_unknown_keys(from_file, sections, {"compare"});  // `strata compare`'s tolerances (src/compare/)
  reject_unknown_keys(from_set, sections);
  std::set<std::string> given;
  for (const Field& field : known) {
    auto [section, name] = split_key(field.key);
    // An override replaces the file's value, whatever that was.
    for (const TomlReader* layer : {&from_set, &from_file}) {
      TomlReader table = layer->table(section, false);
      if (table.has(name)) {
        assign(field, table, name);
        given.insert(field.key);
        break;
      }
    }
  }
  try {
    if (std::filesystem::is_directory(config.init_from)) {
      std::set<std::string> given_model_keys;
      for (const std::string& key : given) {
        if (key.rfind("model.", 0) == 0) given_model_keys.insert(key.substr(6));
      }
      adopt_hf_model_config(config.model, given_model_keys, config.init_from);
    }
    config.validate();
  } catch (const Error& error) {
    fail("{}: {}", source, error.what());
  }
  // One spelling saved and printed: the dtype's name (fp32 is read as f32).
  config.precision = std::string(dtype_name(config.precision_policy().low));
  return config;
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_train_config(read_text_file(path), path, overrides);
}

std::string to_toml(const TrainConfig& config) {
  TrainConfig copy = config;
  std::map<std::string, toml::table> sections;
  for (const Field& field : fields(copy)) {
    const auto [section_name, key_name] = split_key(field.key);
    std::visit(
        [&, section = section_name, name = key_name](auto* value) {
          using T = std::remove_pointer_t<decltype(value)>;
          if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            toml::array array;
            for (const std::string& text : *value) array.push_back(text);
            sections[section].insert(name, std::move(array));
          } else {
            sections[section].insert(name, *value);
          }
        },
        field.ref);
  }
  toml::table root;
  for (auto& [name, table] : sections) root.insert(name, std::move(table));
  std::ostringstream out;
  out << root << "\n";
  return out.str();
}

}  // namespace strata
