#include "train/config.h"

#include <algorithm>
#include <cmath>
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
#include "core/toml_reader.h"
#include "model/hf_model_dir.h"
#include "parallel/pipeline_schedule.h"

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
      {"parallel.dp", &c.dp},
      {"parallel.tp", &c.tp},
      {"parallel.sp", &c.sp},
      {"parallel.pp", &c.pp},
      {"parallel.ep", &c.ep},
      {"parallel.schedule", &c.schedule},
      {"parallel.virtual_stages", &c.virtual_stages},
      {"parallel.bucket_mb", &c.bucket_mb},
      {"parallel.zero", &c.zero},
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

namespace {

template <typename T>
void check_finite(const char* key, T value) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) fail("key '{}' must be a finite number, got {}", key, value);
  }
}

template <typename T>
void check_positive(const char* key, T value) {
  check_finite(key, value);
  if (!(value > 0)) fail("key '{}' must be positive, got {}", key, value);
}

template <typename T>
void check_non_negative(const char* key, T value) {
  check_finite(key, value);
  if (value < 0) fail("key '{}' must be at least 0, got {}", key, value);
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
  check_non_negative("parallel.dp", dp);
  check_positive("parallel.tp", tp);
  if (model.n_head % tp != 0) {
    fail("key 'parallel.tp' ({}) must divide model.n_head ({}): each tensor-parallel rank computes whole heads", tp,
         model.n_head);
  }
  if (model.kv_heads() % tp != 0) {
    fail("key 'parallel.tp' ({}) must divide the key/value heads (model.n_kv_head = {}): each tensor-parallel rank "
         "holds whole heads",
         tp, model.kv_heads());
  }
  if (sp && tp == 1) fail("key 'parallel.sp' needs parallel.tp > 1: the sequence is split over the tensor-parallel ranks");
  if (sp && model.block_size % tp != 0) {
    fail("key 'parallel.sp': model.block_size ({}) must be a multiple of parallel.tp ({}) to split the sequence",
         model.block_size, tp);
  }
  check_positive("parallel.pp", pp);
  if (pp > model.n_layer) {
    fail("key 'parallel.pp' ({}) exceeds model.n_layer ({}): every pipeline stage needs at least one layer", pp,
         model.n_layer);
  }
  check_positive("parallel.virtual_stages", virtual_stages);
  check_pipeline_layout(parse_schedule(schedule, "key 'parallel.schedule'"), static_cast<int>(pp),
                        static_cast<int>(virtual_stages), static_cast<int>(model.n_layer));
  if (model.vocab_size < tp) {
    fail("key 'parallel.tp' ({}) exceeds model.vocab_size ({}): every rank needs vocabulary rows", tp,
         model.vocab_size);
  }
  check_positive("parallel.ep", ep);
  if (ep > 1 && model.num_experts == 0) {
    fail("key 'parallel.ep' ({}) needs a mixture-of-experts model (model.num_experts > 0): it splits the experts", ep);
  }
  if (model.num_experts % ep != 0) {
    fail("key 'parallel.ep' ({}) must divide model.num_experts ({}): each expert-parallel rank holds whole experts", ep,
         model.num_experts);
  }
  check_positive("parallel.bucket_mb", bucket_mb);
  if (zero < 0 || zero > 2) fail("key 'parallel.zero' must be 0, 1 or 2, got {}", zero);
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
}

MeshShape TrainConfig::mesh_for(int ranks) const {
  const int tensor = static_cast<int>(tp), pipeline = static_cast<int>(pp), experts = static_cast<int>(ep);
  if (ranks % (tensor * pipeline * experts) != 0) {
    if (experts > 1) {
      fail("keys 'parallel.tp' ({}), 'parallel.pp' ({}) and 'parallel.ep' ({}): their product must divide the {} ranks "
           "launched",
           tensor, pipeline, experts, ranks);
    }
    fail("keys 'parallel.tp' ({}) and 'parallel.pp' ({}): their product must divide the {} ranks launched", tensor,
         pipeline, ranks);
  }
  const int data = dp == 0 ? ranks / (tensor * pipeline * experts) : static_cast<int>(dp);
  if (tensor == 1 && pipeline == 1 && data * experts != ranks) {
    fail("key 'parallel.dp' is {} but the job has {} ranks: with parallel.tp = 1, parallel.dp must equal the "
         "number of ranks{} (or be 0)",
         data, ranks, experts > 1 ? " over parallel.ep" : "");
  }
  return MeshShape({{"dp", data}, {"tp", tensor}, {"pp", pipeline}, {"ep", experts}});
}

MeshShape TrainConfig::mesh() const {
  return MeshShape({{"dp", static_cast<int>(std::max<int64_t>(dp, 1))}, {"tp", static_cast<int>(tp)},
                    {"pp", static_cast<int>(pp)}, {"ep", static_cast<int>(ep)}});
}

ModelBuildOptions model_build_options(const TrainConfig& config, bool training) {
  return {.precision = config.precision_policy(),
          .recompute = training ? parse_recompute_mode(config.recompute, "train.recompute") : RecomputeMode::None,
          .fuse = config.fuse};
}

PrecisionPolicy TrainConfig::precision_policy() const {
  return PrecisionPolicy::parse(precision, fp32_ops, "precision.fp32_ops");
}

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
