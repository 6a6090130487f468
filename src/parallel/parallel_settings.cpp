#include "parallel/parallel_settings.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace strata {

namespace {

// Where `settings` hold the dimension's degree key (the one named as it); null for a dimension without one.
int64_t* degree_field(const ParallelDimension& dimension, ParallelSettings& settings) {
  for (const DimensionKey& key : dimension.keys) {
    if (key.name == dimension.name) return std::get<int64_t*>(key.field(settings));
  }
  return nullptr;
}

// The dimension's degree, as configured; 1 for a dimension without a degree key.
int64_t configured_degree(const ParallelDimension& dimension, const ParallelSettings& settings) {
  ParallelSettings read = settings;  // a key's field is reached through settings it may write
  const int64_t* degree = degree_field(dimension, read);
  return degree ? *degree : 1;
}

}  // namespace

std::vector<std::pair<std::string, TomlReader::Target>> ParallelSettings::keys() {
  std::vector<std::pair<std::string, TomlReader::Target>> all;
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    for (const DimensionKey& key : dimension.keys) all.emplace_back("parallel." + key.name, key.field(*this));
  }
  return all;
}

void ParallelSettings::check(const ModelConfig& model) const {
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    if (dimension.check) dimension.check(*this, model);
  }
}

void ParallelSettings::set_degree(std::string_view dimension, int64_t degree) {
  if (int64_t* field = degree_field(parallel_dimension(dimension), *this)) {
    *field = degree;
    return;
  }
  STRATA_CHECK(degree == 1, "parallel dimension '{}' has no degree key: its degree is 1, not {}", dimension, degree);
}

MeshShape ParallelSettings::mesh() const {
  std::map<std::string, int> degrees;
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    degrees[dimension.name] = static_cast<int>(std::max<int64_t>(configured_degree(dimension, *this), 1));
  }
  return MeshShape(degrees);
}

MeshShape ParallelSettings::mesh_for(int ranks) const {
  std::map<std::string, int> degrees;
  const ParallelDimension* remaining = nullptr;  // takes the ranks the others leave when its degree is 0
  int others = 1;
  std::vector<std::string> named;  // the others' keys, as messages name them: "'parallel.tp' (2)"
  // A dimension besides the batch's splits the model: a product that is not the world is then DeviceMesh's to
  // name, with every degree.
  bool splits_layers = false;
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    const int degree = static_cast<int>(configured_degree(dimension, *this));
    degrees[dimension.name] = degree;
    if (dimension.takes_remaining_ranks) {
      remaining = &dimension;
      continue;
    }
    others *= degree;
    splits_layers = splits_layers || (!dimension.splits_batch && degree > 1);
    if (!dimension.named_when_set_only || degree > 1) {
      named.push_back(fmt::format("'parallel.{}' ({})", dimension.name, degree));
    }
  }
  if (ranks % others != 0) {
    const auto last = named.end() - 1;
    const std::string keys = named.size() == 1
                                 ? "key " + named[0]
                                 : fmt::format("keys {} and {}", fmt::join(named.begin(), last, ", "), *last);
    fail("{}: {} must divide the {} ranks launched", keys, named.size() == 1 ? "it" : "their product", ranks);
  }
  if (remaining == nullptr) return MeshShape(degrees);
  int& degree = degrees[remaining->name];
  if (degree == 0) degree = ranks / others;
  if (!splits_layers && degree * others != ranks) {
    fail("key 'parallel.{}' is {} but the job has {} ranks: the other parallel.* degrees leave {} (set it to that, or "
         "to 0 for the ranks left)",
         remaining->name, degree, ranks, ranks / others);
  }
  return MeshShape(degrees);
}

}  // namespace strata
