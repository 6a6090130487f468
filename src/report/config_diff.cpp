#include "report/config_diff.h"

#include <set>

namespace strata {

ConfigDiff diff_configs(const std::vector<std::map<std::string, std::string>>& configs) {
  std::set<std::string> keys;
  for (const auto& config : configs) {
    for (const auto& [key, value] : config) keys.insert(key);
  }
  ConfigDiff diff;
  for (const std::string& key : keys) {
    ConfigDifference difference{key, {}};
    for (const auto& config : configs) {
      auto found = config.find(key);
      difference.values.push_back(found == config.end() ? std::nullopt : std::optional(found->second));
    }
    bool same = true;
    for (const auto& value : difference.values) same = same && value && value == difference.values.front();
    if (same) {
      ++diff.agreeing;
    } else {
      diff.differing.push_back(std::move(difference));
    }
  }
  return diff;
}

}  // namespace strata
