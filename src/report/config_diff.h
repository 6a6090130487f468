#pragma once
// What several runs' configs set differently, key by key.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata {

struct ConfigDifference {
  std::string key;                                 // dotted, "ops.backend"
  std::vector<std::optional<std::string>> values;  // per run, as TOML text; nullopt: the run has no such key
};

struct ConfigDiff {
  std::vector<ConfigDifference> differing;  // in key order
  int64_t agreeing = 0;                     // keys every run sets to the same value
};

// `configs`: each run's dotted key -> TOML text (TomlReader::leaf_texts).
ConfigDiff diff_configs(const std::vector<std::map<std::string, std::string>>& configs);

}  // namespace strata
