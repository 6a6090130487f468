#include "parallel/pipeline_parallel.h"

#include <algorithm>
#include <vector>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/key_checks.h"
#include "model/family.h"
#include "parallel/parallel_settings.h"
#include "parallel/parallelize.h"
#include "parallel/pipeline_part.h"
#include "parallel/pipeline_schedule.h"

namespace strata {

PipelineParallel::PipelineParallel(comm::Communicator group) : group_(std::move(group)) {}

PipelineParallel PipelineParallel::of(DeviceMesh* mesh) {
  const std::string& name = pipeline_parallel_dimension().name;
  return mesh && mesh->shape().degree(name) > 1 ? PipelineParallel(mesh->group(name)) : PipelineParallel();
}

comm::Handle PipelineParallel::send_async(const Tensor& tensor, int stage) {
  STRATA_CHECK(group_.has_value(), "a pipeline transfer without stages");
  STRATA_CHECK(tensor.is_contiguous(), "a pipeline send of a strided tensor");
  return group_->send_async(tensor.raw(), static_cast<size_t>(tensor.numel()), tensor.dtype(), stage);
}

void PipelineParallel::receive(Tensor& tensor, int stage) {
  STRATA_CHECK(group_.has_value(), "a pipeline transfer without stages");
  STRATA_CHECK(tensor.is_contiguous(), "a pipeline receive into a strided tensor");
  group_->recv(tensor.raw(), static_cast<size_t>(tensor.numel()), tensor.dtype(), stage);
}

void PipelineParallel::sum_tied_gradient(Tensor& grad) {
  if (degree() == 1) return;
  STRATA_CHECK(first() || last(), "stage {} holds no copy of the tied embedding", stage());
  const int peer = first() ? degree() - 1 : 0;
  Tensor theirs = Tensor::empty(grad.shape(), grad.dtype());
  comm::Handle sent = send_async(grad, peer);
  receive(theirs, peer);
  sent.wait();
  // a + b is b + a in IEEE arithmetic: both stages get the same bits.
  float* mine = grad.data<float>();
  const float* other = theirs.data<float>();
  for (int64_t i = 0; i < grad.numel(); ++i) mine[i] += other[i];
}

std::vector<double> PipelineParallel::from_last_stage(std::vector<double> values) {
  if (degree() == 1 || values.empty()) return values;
  group_->broadcast(values.data(), values.size(), DType::F64, degree() - 1);
  return values;
}


namespace {

std::optional<ParallelForward> cut_stage(const Graph& forward, const DimensionPassInput& input) {
  std::optional<ParallelForward> part;
  if (input.layout.part.parts() > 1) part = cut_pipeline_part(forward, input.layout.part, input.layer_prefix);
  return part;
}

// The stages holding each parameter: those whose parts read it (the tied embedding's two, through
// either copy), found by cutting the model's graph as the trainer does.
std::vector<ParameterPlacement> place_stages(const PlacementInput& input) {
  std::vector<ParameterPlacement> placements(input.specs.size(), ParameterPlacement{.holders = {0}});
  const int parts = input.degree * input.parts_per_stage;
  if (parts == 1) return placements;
  const int layers = static_cast<int>(input.model.n_layer);
  check_pipeline_layout(input.parts_per_stage > 1 ? PipelineSchedule::Interleaved : PipelineSchedule::OneFOneB,
                        input.degree, input.parts_per_stage, layers);
  const std::vector<int> split = static_cast<int>(input.layers_per_part.size()) == parts
                                     ? input.layers_per_part
                                     : balanced_layers(parts, layers);
  const ModelFamily& family = model_family(input.model);
  const std::string tied = family.tied_embedding(input.model);
  for (ParameterPlacement& placement : placements) placement.holders.clear();
  for (int part = 0; part < parts; ++part) {
    ModelBuildOptions options;
    const PipelinePart cut{part, split, input.parts_per_stage};
    options.parallelize = [cut, prefix = std::string(family.layer_prefix())](const Graph& forward) {
      return cut_pipeline_part(forward, cut, prefix);
    };
    const ModelGraph model = build_model_graph(input.model, 1, 1, /*training=*/false, options);
    for (size_t i = 0; i < input.specs.size(); ++i) {
      const bool reads = model.params[i] >= 0 || (input.specs[i].name == tied && model.head_copy >= 0);
      std::vector<int>& holders = placements[i].holders;
      if (reads && std::find(holders.begin(), holders.end(), part % input.degree) == holders.end()) {
        holders.push_back(part % input.degree);
      }
    }
  }
  for (ParameterPlacement& placement : placements) std::sort(placement.holders.begin(), placement.holders.end());
  return placements;
}

// Model part `chunk` of a stage is part chunk · stages + stage: interleaving deals the parts round-robin.
void locate(RankLayout& layout, const RankPosition& position) {
  layout.part = {.index = position.chunk * position.degree + position.coordinate,
                 .layers_per_part = position.options.layers_per_part,
                 .chunks = static_cast<int>(position.options.settings.virtual_stages)};
}

void check_settings(const ParallelSettings& settings, const ModelConfig& model) {
  check_positive("parallel.pp", settings.pp);
  if (settings.pp > model.n_layer) {
    fail("key 'parallel.pp' ({}) exceeds model.n_layer ({}): every pipeline stage needs at least one layer",
         settings.pp, model.n_layer);
  }
  check_positive("parallel.virtual_stages", settings.virtual_stages);
  check_pipeline_layout(parse_schedule(settings.schedule, "key 'parallel.schedule'"), static_cast<int>(settings.pp),
                        static_cast<int>(settings.virtual_stages), static_cast<int>(model.n_layer));
}

std::string summarize(const DimensionSummaryInput& input) {
  const std::vector<int>& split = input.options.layers_per_part;
  return fmt::format("pipeline parallel: {} stages ({} schedule, {} micro-batches per step and replica; layers per "
                     "stage {}{}; the first stage also runs the embedding, the last the head and loss; the tied "
                     "embedding's two copies' gradients are summed)\n",
                     input.degree, input.options.settings.schedule, input.micro_batches_per_rank, fmt::join(split, "+"),
                     input.planned_layers_per_part == split ? ", the planner's split" : "");
}

}  // namespace

ParallelDimension pipeline_parallel_dimension() {
  return {.name = kPipelineDimension,
          .nesting = 3,
          .point_to_point = true,
          .pass = cut_stage,
          .place = place_stages,
          .locate = locate,
          .summarize = summarize,
          .keys = {settings_key<&PipelineParallelSettings::pp>(kPipelineDimension),
                   settings_key<&PipelineParallelSettings::schedule>("schedule"),
                   settings_key<&PipelineParallelSettings::virtual_stages>("virtual_stages")},
          .check = check_settings};
}

}  // namespace strata
