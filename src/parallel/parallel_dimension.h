#pragma once
// Parallel dimensions as named, registered parts of the device mesh. Each dimension has a name
// (its process group's, the collective ops' `group` attribute and its config key
// `parallel.<name>`), a nesting (where its ranks sit in the world: the lowest varies fastest, so
// Megatron's order puts tensor-parallel ranks on consecutive world ranks, inside a node where their
// per-layer collectives are cheap, then data parallelism, and pipeline stages outermost, where stage
// boundaries cross the slowest links least often), and whether its group carries ordered
// point-to-point flows besides collectives (pipeline stage boundaries). The mesh, the collective
// groups and the checkpoint's rank layout loop over the registered dimensions; adding one is its own
// files, one entry in `builtin_dimensions()` (or `register_parallel_dimension`), and its config key.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/toml_reader.h"
#include "model/model_graph.h"
#include "model/sharding_plan.h"
#include "parallel/parameter_placement.h"

namespace strata {

struct RankLayout;
struct ParallelSettings;

// A parallel.* key a dimension declares: its name after "parallel.", and where its value lives in
// the settings (its type and default are that field's). A key named as the dimension is its degree.
struct DimensionKey {
  std::string name;
  std::function<TomlReader::Target(ParallelSettings&)> field;
};
// Fails, naming the key, on an impossible value of the dimension's keys (for the model, or with its
// other keys).
using CheckSettings = std::function<void(const ParallelSettings& settings, const ModelConfig& model)>;

// What the dimensions read beyond their degrees: their configured keys, and the model's cut into
// parts (every part's layers, in order).
struct DimensionOptions {
  const ParallelSettings& settings;
  const std::vector<int>& layers_per_part;
};

// What a dimension's graph pass reads: the family's plan and layer labels, and where this rank sits.
struct DimensionPassInput {
  const ShardingPlan& plan;
  const std::string& layer_prefix;
  const RankLayout& layout;
};
// The part of `forward` this rank runs along the dimension, or nothing where the layout does not
// split the model along it (one coordinate).
using DimensionPass = std::function<std::optional<ParallelForward>(const Graph& forward, const DimensionPassInput&)>;
// Every parameter's placement along the dimension (parallel/parameter_placement.h); fails naming the
// parallel.* key when the model cannot be placed at that degree.
using PlaceParameters = std::function<std::vector<ParameterPlacement>(const PlacementInput&)>;
// Where a rank at `coordinate` of `degree` sits along the dimension, for its model part `chunk`
// (one of the parts its stage runs): the dimension fills its own part of `layout`.
struct RankPosition {
  int degree = 1;
  int coordinate = 0;
  const DimensionOptions& options;
  int chunk = 0;
};
using LocateRank = std::function<void(RankLayout& layout, const RankPosition& position)>;
// What a run prints at start-up about the dimension at a degree above 1: one line saying how it
// splits the work.
struct DimensionSummaryInput {
  const ModelConfig& model;
  int degree = 1;
  const DimensionOptions& options;
  int64_t micro_batches_per_rank = 0;          // of a step, on each rank sharing it
  double parameters_per_rank = 0;              // the elements this rank holds
  const std::vector<int>& planned_layers_per_part;  // the planner's split, when it priced this layout
};
using SummarizeDimension = std::function<std::string(const DimensionSummaryInput&)>;

struct ParallelDimension {
  std::string name;
  int nesting = 0;
  bool point_to_point = false;
  // Its runtime works on a device's memory (else it runs on host memory only, and a job on a device
  // is refused at a degree above 1).
  bool runs_on_devices = false;
  // Its coordinates run different micro-batches of a step (data parallelism; expert parallelism,
  // whose ranks hold the same dense layers): a step's micro-batches are shared over the ranks that
  // differ along such dimensions, and a parameter's gradient is summed over those that do not split it.
  bool splits_batch = false;
  // It applies to some models only (experts): the mesh's messages name its key only when it is set.
  bool named_when_set_only = false;
  // Its degree key may be 0, "the ranks the other dimensions leave" (data parallelism); one dimension at most.
  bool takes_remaining_ranks = false;
  // Unset: the dimension leaves every rank's graph whole (replicas, as data parallelism). Passes
  // run innermost first: a layer is split before the model is cut into stages.
  DimensionPass pass;
  // Unset: every coordinate holds every parameter whole.
  PlaceParameters place;
  // Unset: its pass (if any) reads nothing of the rank's position.
  LocateRank locate;
  // Unset: it prints nothing of its own (data parallelism's line is the gradients' reduction's).
  SummarizeDimension summarize;
  // Its config keys (none: degree 1 always) and their checks.
  std::vector<DimensionKey> keys;
  CheckSettings check;
};

// Every dimension: the built-in ones, then those registered, in that order (the order their
// config keys are named in messages).
const std::vector<ParallelDimension>& parallel_dimensions();
// The same, innermost (lowest nesting) first: the mesh's order, and the order passes run in.
std::vector<ParallelDimension> dimensions_innermost_first();
// Adds a dimension (a test's, or a plug-in's); fails on a name already taken.
void register_parallel_dimension(ParallelDimension dimension);
// Removes a registered (not a built-in) dimension.
void unregister_parallel_dimension(std::string_view name);
const ParallelDimension& parallel_dimension(std::string_view name);  // fails naming an unknown one
// The names of the dimensions that split a step's micro-batches (splits_batch), innermost first.
std::vector<std::string> batch_dimensions();

}  // namespace strata
