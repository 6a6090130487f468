#include "parallel/parallel_settings.h"

#include <algorithm>
#include <map>

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

}  // namespace strata
