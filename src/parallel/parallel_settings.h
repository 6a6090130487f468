#pragma once
// The parallel.* settings: every built-in dimension's keys, each declared in its own files (the
// settings struct beside the dimension, the keys and their checks with its registration), joined here
// as builtin_dimensions() joins the dimensions. The job's config is these settings (TrainConfig
// derives from them), read and checked by looping over the registered dimensions' keys.
#include <string>
#include <string_view>
#include <vector>

#include "parallel/data_parallel.h"
#include "parallel/device_mesh.h"
#include "parallel/expert_parallel.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/tensor_parallel_dimension.h"

namespace strata {

struct ParallelSettings : DataParallelSettings, TensorParallelSettings, PipelineParallelSettings, ExpertParallelSettings {
  // Every registered dimension's keys ("parallel.tp"), with where each value lives.
  std::vector<std::pair<std::string, TomlReader::Target>> keys();
  // Runs every dimension's checks, in registration order: the first impossible value is named.
  void check(const ModelConfig& model) const;
  // Sets `dimension`'s degree key (parallel.<dimension>); a dimension without one takes 1 only.
  void set_degree(std::string_view dimension, int64_t degree);
  // The configured degrees as a mesh (parallel.dp = 0, "the ranks left", counted as 1).
  MeshShape mesh() const;
  // The mesh of a job of `ranks`: parallel.dp = 0 takes the ranks left; fails naming the keys
  // when the degrees do not make the ranks.
  MeshShape mesh_for(int ranks) const;
};

// The key `name` whose value is `member` of a dimension's settings: settings_key<&TensorParallelSettings::tp>("tp").
template <auto member>
DimensionKey settings_key(std::string name) {
  return {std::move(name), [](ParallelSettings& settings) { return TomlReader::Target(&(settings.*member)); }};
}

}  // namespace strata
