#include "train/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "backends/backends.h"
#include "ckpt/hf_weights.h"
#include "data/corpus.h"
#include "data/token_shard.h"
#include "graph/profile_report.h"
#include "model/family.h"
#include "parallel/parameter_placement.h"
#include "train/op_coverage.h"
#include "train/stop_signals.h"

namespace strata {

namespace {

std::set<int> kept_values(const ModelGraph& model) {
  std::set<int> kept(model.sent_values.begin(), model.sent_values.end());
  if (model.loss >= 0) kept.insert(model.loss);
  for (int value : RouterTally(model).values()) kept.insert(value);
  // The LM head's copy of the tied embedding has a gradient bucket of its own, collected as soon as
  // the node making it has run: its bytes need not outlive the run (as the sum both uses' gradients
  // made inside the graph did not).
  for (const auto& [value, grad] : model.grads.of) {
    if (value != model.head_copy) kept.insert(grad);
  }
  return kept;
}

AdamWSettings adamw_settings(const TrainConfig& config) {
  return {config.beta1, config.beta2, config.adam_eps, config.weight_decay};
}

LossScaleSettings loss_scale_settings(const TrainConfig& config) {
  return {config.precision_policy().low == DType::F16, config.loss_scale, config.loss_scale_growth_interval, config.loss_scale_growth,
          config.loss_scale_backoff};
}

size_t bucket_bytes(const TrainConfig& config) { return static_cast<size_t>(config.bucket_mb * (1 << 20)); }

std::vector<Tensor> tensors_of(ParameterSet& params) {
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < params.size(); ++i) tensors.push_back(params.tensor(i));
  return tensors;
}

// Refuses, before anything is allocated, a model whose weights, gradients and
// AdamW state alone cannot fit in this machine's memory with every rank on it.
TrainConfig fits_in_memory(TrainConfig config, const JobWorld& world, const DataParallel& parallel) {
  config.validate();
  // Each rank holds its share of the dimensions that split or cut the model (not those sharing the batch).
  const MeshShape mesh = config.mesh();
  double model_split = 1;
  for (const MeshExtent& extent : mesh.extents()) {
    if (!parallel_dimension(extent.dimension).splits_batch) model_split *= extent.degree;
  }
  const double parameters = static_cast<double>(config.model.num_parameters()) / model_split;
  const int ranks = world.ranks_on_this_host();
  const double moment_share = config.zero >= 1 ? 1.0 / parallel.degree() : 1.0;
  const double bytes = parameters * (4 + 4 + 8 * moment_share) * ranks;
  const double machine = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  if (bytes > machine) {
    fail("the model (model.n_layer = {}, model.n_embd = {}: {:.3g} parameters) needs at least {:.1f} GiB for "
         "weights, gradients and AdamW state on the {} rank(s) of this host, but the machine has {:.1f} GiB",
         config.model.n_layer, config.model.n_embd, parameters, bytes / (1 << 30), ranks, machine / (1 << 30));
  }
  return config;
}


template <typename T>
std::vector<T> held_of(const std::vector<T>& all, const std::vector<size_t>& held) {
  std::vector<T> part;
  for (size_t index : held) part.push_back(all[index]);
  return part;
}

}  // namespace

// Builds the model's graph as this rank runs it: whole, or its tensor-parallel and pipeline part.
ModelGraph build_rank_model(const TrainConfig& config, bool training, const RankLayout& layout,
                            bool narrow_gradients) {
  ModelBuildOptions options = model_build_options(config, training);
  options.separate_head_copy = true;
  options.narrow_gradients = narrow_gradients;
  if (layout.splits_model()) {
    const ModelFamily& family = model_family(config.model);
    options.parallelize = [layout, plan = family.sharding_plan(),
                           prefix = std::string(family.layer_prefix())](const Graph& forward) {
      return parallelize_forward(forward, plan, prefix, layout);
    };
  }
  return build_model_graph(config.model, config.batch_size, config.model.block_size, training, options);
}

Trainer::Trainer(TrainConfig config, DeviceMesh* mesh)
    : world_(JobWorld::of(mesh)),
      parallel_(DataParallel::of(mesh)),
      config_(fits_in_memory(std::move(config), world_, parallel_)),
      pipeline_(PipelineParallel::of(mesh)),
      mesh_(mesh ? mesh->shape() : MeshShape()),
      device_mesh_(mesh),
      coordinates_(mesh ? mesh->coordinates() : coordinates_of(0, mesh_)),
      specs_(model_param_specs(config_.model)),
      schedule_{config_.lr, config_.lr_min, config_.warmup_steps, config_.steps},
      dispatcher_(make_dispatcher(config_.backend, parse_fallback_policy(config_.fallback), config_.device)),
      scaler_(loss_scale_settings(config_)) {
  check_job();
  apply_plan();
  build_model_chunks();
  find_held_parameters();
  make_optimizer();
  open_data();
  compile_graphs();
  start_or_resume();
}

void Trainer::check_job() {
  world_.check_ranks_agree(to_toml(config_));
  if (const DType low = config_.precision_policy().low; !device().capabilities().computes(low) && !config_.emulate) {
    std::vector<std::string> native;
    for (DType dtype : device().capabilities().native_dtypes) native.emplace_back(dtype_name(dtype));
    fail("precision.compute = \"{}\": {} has no {} arithmetic (it computes {}); set ops.emulate = true to compute "
         "it in f32 there, rounding each result to {} (reported as emulated), or use another precision",
         dtype_name(low), device().name(), dtype_name(low), fmt::join(native, ", "), dtype_name(low));
  }
  for (const MeshExtent& extent : mesh_.extents()) {
    if (!device().is_host() && extent.degree > 1 && !parallel_dimension(extent.dimension).runs_on_devices) {
      fail("ops.backend = \"{}\" runs on {}: parallel.{} = {} does not run on a device yet (its collectives read "
           "host memory); data parallelism with parallel.zero = 0 does",
           config_.backend, device().name(), extent.dimension, extent.degree);
    }
  }
  if (!device().is_host() && config_.zero > 0) {
    fail("ops.backend = \"{}\" runs on {}: ZeRO does not run on a device yet (its collectives read host memory); "
         "data parallelism with parallel.zero = 0 does",
         config_.backend, device().name());
  }
  const MeshShape configured = config_.mesh_for(mesh_.size());
  for (const MeshExtent& extent : mesh_.extents()) {
    STRATA_CHECK(extent.degree == configured.degree(extent.dimension), "a '{}' group of {} for the config's {}",
                 extent.dimension, extent.degree, configured.degree(extent.dimension));
  }
}

void Trainer::apply_plan() {
  // 0: one process on every core, as the runtime's default (and a profile's largest measured count).
  const int ranks = mesh_.size();
  plan_threads_ = config_.threads > 0 || ranks > 1 ? threads_per_rank(config_, world_.ranks_on_this_host()) : 0;
  if (plan_threads_ > 0) omp_set_num_threads(plan_threads_);
  set_sum_order(config_.summation_order());
  AppliedPlan applied;
  if (config_.plan == "auto") applied = apply_auto_plan(config_, mesh_, plan_threads_);
  if (config_.accumulation_steps() % parallel_.degree() != 0) {
    fail("key 'train.global_batch' ({}) must be a multiple of train.batch_size ({}) times the {} data-parallel "
         "ranks, so that every rank runs the same number of micro-batches",
         config_.global_batch, config_.batch_size, parallel_.degree());
  }
  check_pipeline_schedule();
  if (config_.plan != "auto") applied = describe_manual_plan(config_, mesh_, plan_threads_);
  plan_ = std::move(applied.plan);
  plan_summary_ = std::move(applied.summary);
  peak_ = peak_flops(config_, ranks, plan_threads_);
}

void Trainer::build_model_chunks() {
  layers_per_stage_ = pipeline_layer_split();
  const DimensionOptions options = dimension_options();
  for (int chunk = 0; chunk < chunks_per_stage(); ++chunk) {
    const RankLayout layout = rank_layout(mesh_, coordinates_, options, chunk);
    chunks_.push_back({build_rank_model(config_, /*training=*/true, layout, sums_no_gradients()),
                       build_rank_model(config_, /*training=*/false, layout)});
  }
}

// One micro-batch on one rank of one stage, unscaled: each gradient is the graph's as it is made, so
// bf16 ones need no f32 copy to be summed in.
bool Trainer::sums_no_gradients() const {
  return config_.precision_policy().low != DType::F32 && parallel_.degree() == 1 &&
         config_.accumulation_steps() == 1 && !pipelined() && config_.zero == 0 && !scaler_.dynamic() &&
         scaler_.scale() == 1.0;
}

DimensionOptions Trainer::dimension_options() const {
  return {.settings = config_, .layers_per_part = layers_per_stage_};
}

// What this rank holds: the parameters its chunks read (the tied embedding through either copy),
// and the gradients it collects: one per parameter, plus the LM head's copy of the tied embedding
// when the embedding's is here too (one process, or a one-stage pipeline).
void Trainer::find_held_parameters() {
  const std::string tied = model_family(config_.model).tied_embedding(config_.model);
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].name == tied) tied_index_ = i;
  }
  const size_t tied_index = tied_index_.value_or(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    for (size_t chunk = 0; chunk < chunks_.size(); ++chunk) {
      const ModelGraph& model = chunks_[chunk].train_model;
      for (int value : {model.params[i], i == tied_index ? model.head_copy : -1}) {
        if (value < 0) continue;
        if (!held_.empty() && held_.back() == i) {  // the head's copy, beside the embedding's
          STRATA_CHECK(i == tied_index && value == model.head_copy, "parameter '{}' in two chunks of one stage",
                       specs_[i].name);
          head_copy_entry_ = entries_.size();
          entries_.push_back({held_.size() - 1, static_cast<int>(chunk), value});
          continue;
        }
        held_.push_back(i);
        entries_.push_back({held_.size() - 1, static_cast<int>(chunk), value});
      }
    }
  }
  // The head's copy, collected apart, comes last (after every parameter's own entry).
  if (head_copy_entry_ && *head_copy_entry_ != entries_.size() - 1) {
    GradientEntry copy = entries_[*head_copy_entry_];
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(*head_copy_entry_));
    entries_.push_back(copy);
    head_copy_entry_ = entries_.size() - 1;
  }
  placements_ =
      place_parameters(mesh_, {.model = config_.model, .specs = specs_, .layers_per_part = layers_per_stage_,
                                      .parts_per_stage = chunks_per_stage()});
  checkpoint_pieces_ = checkpoint_pieces(specs_, mesh_, placements_);
  pieces_ = held_pieces(specs_, placements_, coordinates_);
  std::vector<ParamSpec> held_specs = held_of(specs_, held_);
  for (size_t k = 0; k < held_.size(); ++k) held_specs[k].shape = pieces_[held_[k]].shape;
  params_ = ParameterSet(held_specs, device());
  param_tensors_ = tensors_of(params_);
}

void Trainer::make_optimizer() {
  GradientEntries entries{.parameters = param_tensors_};
  for (size_t k = 0; k < held_.size(); ++k) {  // the tied embedding's entries get buckets of their own
    if (held_apart(held_[k]) || (head_copy_entry_ && held_[k] == tied_index_)) entries.alone.push_back(k);
  }
  if (head_copy_entry_) {
    entries.head_copy = *head_copy_entry_;
    entries.head_copy_of = entries_[*head_copy_entry_].param;
    entries.parameters.push_back(param_tensors_[entries.head_copy_of]);
    entries.alone.push_back(*head_copy_entry_);
  }
  const DistributedGradientSettings settings{.zero_stage = config_.zero,
                                             .micro_batches_per_rank = config_.accumulation_steps() / parallel_.degree(),
                                             .bucket_bytes = bucket_bytes(config_)};
  std::vector<size_t> entry_parameters;
  for (size_t e = 0; e < entries.parameters.size(); ++e) {
    entry_parameters.push_back(held_[e < held_.size() ? e : entries.head_copy_of]);
  }
  gradients_ = std::make_unique<DistributedGradients>(gradient_groups(device_mesh_, placements_, entry_parameters),
                                                      settings, std::move(entries), device());
  optimizer_.emplace(params_, adamw_settings(config_), gradients_->ranges());
}

void Trainer::open_data() {
  CorpusMeta corpus;
  if (!config_.train_shards.empty()) {  // shards as they are: every token is checked against the model's vocabulary
    corpus.train_shards = shard_files(config_.train_shards, "data.train");
    corpus.val_shards = shard_files(config_.val_shards, "data.val");
  } else {
    corpus = read_corpus_meta(config_.data_dir);
    tokenizer_file_ = std::filesystem::absolute(corpus.tokenizer).string();
    if (corpus.vocab_size > config_.model.vocab_size) {
      fail("the tokenizer in '{}' has {} tokens but model.vocab_size is {}", config_.data_dir, corpus.vocab_size,
           config_.model.vocab_size);
    }
  }
  const int64_t batch = config_.batch_size, seq = config_.model.block_size;
  train_loader_ = std::make_unique<TokenLoader>(corpus.train_shards, batch, seq, config_.model.vocab_size);
  val_loader_ = std::make_unique<TokenLoader>(corpus.val_shards, batch, seq, config_.model.vocab_size);
}

void Trainer::compile_graphs() {
  // GradientSync numbers every chunk's nodes, the last chunk's first: a step's last backward passes
  // run the chunks last to first, so a bucket is complete at its highest-numbered gradient.
  int nodes = 0;
  for (size_t c = chunks_.size(); c-- > 0;) {
    ModelChunk& chunk = chunks_[c];
    chunk.train_graph = std::make_unique<CompiledGraph>(chunk.train_model.graph, *dispatcher_, kept_values(chunk.train_model));
    chunk.eval_graph = std::make_unique<CompiledGraph>(chunk.eval_model.graph, *dispatcher_, kept_values(chunk.eval_model));
    chunk.train_graph->set_trace_name(chunks_.size() > 1 ? fmt::format("train graph (chunk {})", c) : "train graph");
    chunk.eval_graph->set_trace_name(chunks_.size() > 1 ? fmt::format("eval graph (chunk {})", c) : "eval graph");
    chunk.node_offset = nodes;
    nodes += chunk.train_model.graph.num_nodes();
  }
  // The last chunk holds the last stage's part, with the loss and the router's values.
  router_tally_ = RouterTally(chunks_.back().train_model, config_.model.num_experts > 0);
  bind_inputs();
  keep_weight_copies();
  std::vector<int> ready_after;
  for (size_t e = 0; e < entries_.size(); ++e) {
    const GradientEntry& entry = entries_[e];
    const ModelChunk& chunk = chunks_[static_cast<size_t>(entry.chunk)];
    const Value& grad = chunk.train_model.graph.value(chunk.train_model.grads.of.at(entry.value));
    ready_after.push_back(chunk.node_offset + grad.producer);
    if (grad.meta.dtype != chunk.train_model.graph.value(entry.value).meta.dtype) gradients_->narrow(e, grad.meta.dtype);
  }
  gradients_->start_overlap(ready_after, nodes);
}

void Trainer::start_or_resume() {
  checkpoints_.emplace(CheckpointSettings{config_.run_dir, config_.resume, static_cast<int>(config_.checkpoint_keep)},
                       world_);
  if (const std::optional<std::filesystem::path> from = checkpoints_->resume_point()) {
    restore(*from);
  } else {
    initialise_parameters();
  }
}

void Trainer::keep_weight_copies() {
  const DType low = config_.precision_policy().low;
  if (low == DType::F32 || gradients_->sharded_optimizer() || chunks_.size() != 1) return;
  ModelChunk& chunk = chunks_.front();
  weight_copies_.assign(held_.size(), Tensor());
  for (auto [model, graph] : {std::pair{&chunk.train_model, chunk.train_graph.get()},
                              {&chunk.eval_model, chunk.eval_graph.get()}}) {
    std::map<int, size_t> held_of_value;
    for (auto [value, held] : held_parameter_values(*model)) held_of_value[value] = held;
    for (const ParameterCast& cast : parameter_casts(*model, low)) {
      const size_t held = held_of_value.at(cast.param);
      Tensor& copy = weight_copies_[held];
      if (!copy.defined()) copy = Tensor::empty(params_.tensor(held).shape(), low, device());
      weight_copy_uses_.push_back({graph, cast.cast, held});
    }
  }
  std::vector<Tensor> per_range;
  for (const ParameterRange& range : optimizer_->ranges()) per_range.push_back(weight_copies_[range.parameter]);
  optimizer_->keep_copies(std::move(per_range));
}

void Trainer::supply_weight_copies(bool supply) {
  if (supply == weight_copies_supplied_) return;
  for (const WeightCopyUse& use : weight_copy_uses_) {
    if (supply) {
      use.graph->supply(use.value, weight_copies_[use.held]);
    } else {
      use.graph->withdraw(use.value);
    }
  }
  weight_copies_supplied_ = supply;
}

std::vector<std::pair<int, size_t>> Trainer::held_parameter_values(const ModelGraph& model) const {
  std::vector<std::pair<int, size_t>> values;
  for (size_t k = 0; k < held_.size(); ++k) {
    if (model.params[held_[k]] >= 0) values.emplace_back(model.params[held_[k]], k);
    if (held_[k] == tied_index_ && model.head_copy >= 0) values.emplace_back(model.head_copy, k);
  }
  return values;
}

void Trainer::bind_inputs() {
  const int64_t batch = config_.batch_size, seq = config_.model.block_size;
  tokens_ = Tensor::empty({batch, seq}, DType::I32);
  targets_ = Tensor::empty({batch, seq}, DType::I32);
  // On a device the graphs read copies of the batch there; on the host, the loader's own tensors.
  device_tokens_ = device().is_host() ? tokens_ : Tensor::empty({batch, seq}, DType::I32, device());
  device_targets_ = device().is_host() ? targets_ : Tensor::empty({batch, seq}, DType::I32, device());
  positions_ = position_ids(seq).to_device(device());
  loss_seed_ = Tensor::empty({}, DType::F32, device());
  for (ModelChunk& chunk : chunks_) {
    for (auto [model, graph] : {std::pair{&chunk.train_model, chunk.train_graph.get()},
                                {&chunk.eval_model, chunk.eval_graph.get()}}) {
      for (auto [value, held] : held_parameter_values(*model)) graph->bind(value, params_.tensor(held));
      for (auto [value, tensor] : {std::pair{model->tokens, &device_tokens_}, {model->targets, &device_targets_},
                                   {model->positions, &positions_}}) {
        if (value >= 0) graph->bind(value, *tensor);
      }
    }
  }
  if (!pipelined()) {
    chunks_.front().train_graph->bind(chunks_.front().train_model.grads.seed, loss_seed_);
  } else {
    bind_pipeline_inputs();
  }
}

bool Trainer::ranks_compute_together() const {
  for (const MeshExtent& extent : mesh_.extents()) {
    const ParallelDimension& dimension = parallel_dimension(extent.dimension);
    if (extent.degree > 1 && dimension.splits_batch && dimension.pass) return true;
  }
  return false;
}

bool Trainer::holds_every_parameter_whole() const {
  if (held_.size() != specs_.size()) return false;
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (pieces_[i].shape != specs_[i].shape) return false;
  }
  return true;
}

void Trainer::initialise_parameters() {
  if (holds_every_parameter_whole()) {
    if (config_.init_from.empty()) {
      params_.initialise(CounterRng(static_cast<uint64_t>(config_.seed)));
    } else if (device().is_host()) {
      load_hf_weights(config_.init_from, config_.model, params_);
    } else {
      ParameterSet loaded(params_.specs());
      load_hf_weights(config_.init_from, config_.model, loaded);
      params_.copy_from(loaded);
    }
    return;
  }
  // Every rank makes the whole tensors it holds part of and keeps its slices, so each shard is
  // bit for bit the matching part of the single-process model.
  if (!config_.init_from.empty()) {
    ParameterSet whole(specs_);
    load_hf_weights(config_.init_from, config_.model, whole);
    std::vector<Tensor> held = param_tensors_;
    keep_held(tensors_of(whole), held);
    return;
  }
  const CounterRng rng(static_cast<uint64_t>(config_.seed));
  for (size_t k = 0; k < held_.size(); ++k) {
    const ParamSpec& spec = specs_[held_[k]];
    Tensor whole = Tensor::empty(spec.shape, DType::F32);
    ParameterSet::initialise_tensor(spec, whole, rng);
    pieces_[held_[k]].slice(whole, params_.tensor(k));
  }
}

void Trainer::keep_held(const std::vector<Tensor>& whole, std::vector<Tensor>& held) const {
  for (size_t k = 0; k < held_.size(); ++k) pieces_[held_[k]].slice(whole[held_[k]], held[k]);
}

// Each distinct piece of a gradient counts once over the job: along every dimension that neither
// splits the parameter nor (ZeRO) the optimizer's ranges of it, only on the first coordinate holding
// it (a replicated parameter on tensor-parallel rank 0, the tied embedding on its first stage). The
// exact sum over every rank is then one process's, bit for bit.
ExactSquareSum Trainer::gradient_square_sum() {
  const std::vector<std::string> sharded_over = gradients_->sharded_over();
  auto counted_here = [&](size_t index) {
    for (const auto& [dimension, placed] : placements_) {
      const ParameterPlacement& placement = placed[index];
      if (placement.split() || std::find(sharded_over.begin(), sharded_over.end(), dimension) != sharded_over.end()) {
        continue;
      }
      if (coordinates_.at(dimension) != (placement.holders.empty() ? 0 : placement.holders.front())) return false;
    }
    return true;
  };
  std::vector<Tensor> counted;
  const std::vector<ParameterRange>& ranges = optimizer_->ranges();
  for (size_t r = 0; r < ranges.size(); ++r) {
    if (counted_here(held_[ranges[r].parameter])) counted.push_back(gradients_->range_gradients()[r]);
  }
  return world_.sum(square_sum(counted, *dispatcher_));
}

void Trainer::upload_batch() {
  if (device().is_host()) return;
  device_tokens_.copy_from(tokens_);
  device_targets_.copy_from(targets_);
}

double Trainer::run_micro_batch(CompiledGraph& graph, const ModelGraph& model, TokenLoader& loader,
                                const CompiledGraph::NodeHook& after_node) {
  {
    trace::Span span("load batch", "data");
    loader.next(tokens_, targets_);
    upload_batch();
  }
  graph.run(after_node);
  return graph.tensor(model.loss).to_host().item();
}

void Trainer::collect_gradient(size_t entry_index, Tensor& destination, bool accumulate) {
  trace::Span span("collect_gradient", "kernel");
  const GradientEntry& entry = entries_[entry_index];
  STRATA_CHECK(entry.chunk == active_chunk_, "gradient of '{}' collected from chunk {}",
               specs_[held_[entry.param]].name, active_chunk_);
  const ModelChunk& chunk = chunks_[static_cast<size_t>(active_chunk_)];
  Tensor grad = chunk.train_graph->tensor(active_slot_, chunk.train_model.grads.of.at(entry.value));
  if (accumulate) {
    dispatcher_->run("add", {destination, grad}, {destination});
  } else if (&grad.buffer() != &destination.buffer() || grad.offset_bytes() != destination.offset_bytes()) {
    // else place_gradients had the graph write it there
    destination.copy_from(grad);
  }
}

void Trainer::place_gradients(bool in_buckets) {
  if (in_buckets == gradients_in_buckets_) return;
  STRATA_CHECK(chunks_.size() == 1, "gradients placed in buckets with {} model chunks", chunks_.size());
  ModelChunk& chunk = chunks_.front();
  for (size_t e = 0; e < entries_.size(); ++e) {
    const int grad = chunk.train_model.grads.of.at(entries_[e].value);
    const Tensor* destination = gradients_->collected_into(e);
    // Staged buckets (the head copy's gradient, not kept, is read by no node: bindable too).
    if (!destination) continue;
    if (in_buckets) {
      chunk.train_graph->bind(0, grad, *destination);
    } else {
      chunk.train_graph->unbind(0, grad);
    }
  }
  gradients_in_buckets_ = in_buckets;
}

StepMetrics Trainer::step() {
  if (trace_) trace_->before_step(completed_steps_ + 1);
  trace::Span step_span("step", "step");
  if (step_span) step_span.set_args(fmt::format(R"({{"step":{}}})", completed_steps_ + 1));
  auto start = std::chrono::steady_clock::now();
  const int64_t micro_batches = config_.accumulation_steps();
  const double loss_scale = scaler_.scale();
  // Every rank scales by the global count, so the sum over ranks is the step's mean gradient.
  Tensor seed = Tensor::empty({}, DType::F32);
  seed.data<float>()[0] = static_cast<float>(loss_scale / static_cast<double>(micro_batches));
  loss_seed_.copy_from(seed);
  MicroBatchShare share = parallel_.share(micro_batches);
  train_loader_->skip(share.first);
  supply_weight_copies(weight_copies_fresh_);
  const std::vector<double> losses =
      pipelined() ? pipeline_micro_batches(share.count) : this->micro_batches(share);
  train_loader_->skip(micro_batches - share.first - share.count);
  node_observer_ = {};
  double comm_wait_s = 0;
  {
    trace::Span span("gradient sync", "trainer");
    comm_wait_s = gradients_->finish(*dispatcher_);
    sum_tied_gradients();
  }
  double loss_sum = 0;
  {
    trace::Span span("gather losses", "trainer");
    for (double loss : parallel_.gather(losses, micro_batches)) loss_sum += loss;
  }
  StepMetrics metrics;
  metrics.step = completed_steps_ + 1;
  metrics.loss = loss_sum / static_cast<double>(micro_batches);
  metrics.lr = schedule_.at(completed_steps_);
  if (parallel_.degree() > 1) metrics.comm_wait_s = comm_wait_s;
  if (pipelined()) metrics.pipeline_wait_s = pipeline_wait_s_;
  metrics.router = router_tally_.finish(parallel_, micro_batches, [this](std::vector<double> figures) {
    return from_loss_stage(std::move(figures));
  });
  update(metrics, loss_scale);
  completed_steps_ = metrics.step;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t tokens = config_.global_batch * config_.model.block_size;
  metrics.tokens_per_s = static_cast<double>(tokens) / seconds;
  metrics.tokens = metrics.step * tokens;
  if (peak_.flops > 0) {
    const double flops_per_token = model_family(config_.model).training_flops_per_token(config_.model);
    metrics.mfu = flops_per_token * metrics.tokens_per_s / peak_.flops;
  }
  return metrics;
}

std::vector<double> Trainer::micro_batches(const MicroBatchShare& share) {
  std::vector<double> losses;
  ModelChunk& chunk = chunks_.front();
  for (int64_t micro = 0; micro < share.count; ++micro) {
    const bool first = micro == 0, last = micro + 1 == share.count;
    // A captured micro-batch keeps the graph's own gradients: the reduction may be writing the buckets.
    place_gradients(first && !node_observer_);
    trace::Span span("micro-batch", "trainer");
    if (span) span.set_args(fmt::format(R"({{"micro_batch":{}}})", share.first + micro));
    losses.push_back(run_micro_batch(*chunk.train_graph, chunk.train_model, *train_loader_, [&](int node) {
      gradients_->after_node(node, first, last, [&](size_t parameter, Tensor& destination, bool accumulate) {
        collect_gradient(parameter, destination, accumulate);
      });
      if (node_observer_ && first) node_observer_({*chunk.train_graph, chunk.train_model, 0, 0, node});
    }));
    router_tally_.add(*chunk.train_graph);
  }
  return losses;
}

// Unscaling, the norm, clipping, the update and ZeRO's all-gather of the updated parameters.
void Trainer::update(StepMetrics& metrics, double loss_scale) {
  trace::Span span("optimizer", "optimizer");
  std::vector<Tensor>& grads = gradients_->range_gradients();
  if (loss_scale != 1.0) {
    for (Tensor& grad : grads) dispatcher_->run("scale", {grad}, {grad}, {{"factor", 1.0 / loss_scale}});
  }
  // Exact, so a sharded optimizer's ranks find the norm (and skip or clip) exactly as one process does.
  metrics.grad_norm = std::sqrt(gradient_square_sum().value());
  if (scaler_.dynamic()) metrics.loss_scale = loss_scale;
  const bool finite = std::isfinite(metrics.grad_norm);
  if (scaler_.update(finite) && finite) {
    ++optimizer_updates_;
    optimizer_->update(params_, grads, metrics.lr, optimizer_updates_, clip_factor(metrics.grad_norm, config_.grad_clip),
                       *dispatcher_);
    weight_copies_fresh_ = true;  // refreshed by the update where there are any
    gradients_->gather_updated_parameters();
    consecutive_skips_ = 0;
    return;
  }
  // One bad batch must not poison every weight, in any precision; many in a row is a diverged run.
  metrics.skipped = true;
  metrics.skip_reason = scaler_.dynamic() ? fmt::format("inf/nan gradients at loss scale {:g}, now {:g}", loss_scale,
                                                        scaler_.scale())
                                          : "inf/nan gradients";
  if (++consecutive_skips_ > config_.max_skipped_steps) {
    fail("step {}: {} steps in a row had inf/nan gradients (train.max_skipped_steps = {}); the first parameter "
         "with a non-finite gradient is {}: the run has diverged (lower train.lr, or check the data)",
         metrics.step, consecutive_skips_, config_.max_skipped_steps, first_nonfinite_gradient());
  }
  print(fmt::format("step {}: skipped, {}\n", metrics.step, metrics.skip_reason));
}

std::string Trainer::first_nonfinite_gradient() {
  const std::vector<ParameterRange>& ranges = optimizer_->ranges();
  double first = static_cast<double>(params_.size());
  for (size_t r = 0; r < ranges.size(); ++r) {
    if (!std::isfinite(square_sum({gradients_->range_gradients()[r]}, *dispatcher_).value())) {
      first = std::min(first, static_cast<double>(ranges[r].parameter));
    }
  }
  for (double rank_first : parallel_.gather({first}, parallel_.degree())) first = std::min(first, rank_first);
  return first < static_cast<double>(params_.size()) ? "'" + params_.spec(static_cast<size_t>(first)).name + "'"
                                                      : "none (only the loss)";
}

double Trainer::validation_loss() {
  trace::Span span("validation", "validation");
  supply_weight_copies(weight_copies_fresh_);
  MicroBatchShare share = parallel_.share(config_.val_batches);
  val_loader_->seek({});
  val_loader_->skip(share.first);
  // Ranks whose graphs exchange activations (experts') make as many passes as the busiest one,
  // discarding the losses of the extra ones: an uneven share would leave an exchange waiting.
  const int64_t ranks = parallel_.degree();
  const int64_t passes = ranks_compute_together() ? (config_.val_batches + ranks - 1) / ranks : share.count;
  std::vector<double> losses;
  if (pipelined()) {
    losses = pipeline_validation(passes);
  } else {
    for (int64_t batch = 0; batch < passes; ++batch) {
      losses.push_back(run_micro_batch(*chunks_.front().eval_graph, chunks_.front().eval_model, *val_loader_));
    }
  }
  losses.resize(static_cast<size_t>(share.count));
  double total = 0;
  for (double loss : parallel_.gather(losses, config_.val_batches)) total += loss;
  return total / static_cast<double>(config_.val_batches);
}

void Trainer::print(const std::string& text) const {
  if (world_.reports()) fmt::print("{}", text);
}

RankTensors Trainer::checkpoint_tensors(std::vector<Tensor> parameters, GradientBuckets& first_moments,
                                        GradientBuckets& second_moments) {
  return {held_, std::move(parameters), first_moments.grads(), second_moments.grads()};
}

bool Trainer::held_apart(size_t parameter) const {
  for (const auto& [dimension, placed] : placements_) {
    if (placed.at(parameter).holders.size() > 1) return true;
  }
  return false;
}

nlohmann::json Trainer::layout_json() const {
  nlohmann::json layout = {{"sp", config_.sp},
                            {"zero", config_.zero},
                            {"virtual_stages", config_.virtual_stages},
                            {"schedule", config_.schedule}};
  for (const MeshExtent& extent : mesh_.extents()) layout[extent.dimension] = extent.degree;
  return layout;
}

std::vector<Tensor> Trainer::host_copies(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> copies;
  for (const Tensor& tensor : tensors) copies.push_back(tensor.to_host());
  return copies;
}

void Trainer::save_checkpoint() {
  trace::Span span("checkpoint save", "checkpoint");
  // Whole moments of this rank's shards: under ZeRO each rank contributes its share (the others'
  // elements are zero, so the sums are exact copies).
  GradientBuckets first = gradients_->parameter_scratch(), second = gradients_->parameter_scratch();
  optimizer_->export_moments(first.grads(), second.grads());
  gradients_->sum_moment_shares(first);
  gradients_->sum_moment_shares(second);
  TrainingCheckpoint state;
  state.step = completed_steps_;
  state.model = config_.model;
  state.tokenizer = tokenizer_file_;
  state.seed = config_.seed;
  state.train_loader = train_loader_->position();
  state.optimizer_updates = optimizer_updates_;
  // Only a dynamic (fp16) scale is state: a run without one saves none, so an fp16 run resumed from
  // its checkpoint starts from its own initial scale rather than from 1.
  if (scaler_.dynamic()) state.loss_scale = LossScaleState{scaler_.scale(), scaler_.finite_steps()};
  state.layout = layout_json();
  checkpoints_->save(state, specs_, checkpoint_pieces_, checkpoint_tensors(host_copies(param_tensors_), first, second));
}

void Trainer::restore(const std::filesystem::path& checkpoint_dir) {
  GradientBuckets first = gradients_->parameter_scratch(), second = gradients_->parameter_scratch();
  // On a device the parameters are read into host tensors, then copied there.
  std::vector<Tensor> parameters = param_tensors_;
  if (!device().is_host()) {
    for (Tensor& parameter : parameters) parameter = Tensor::empty(parameter.shape(), parameter.dtype());
  }
  const RankTensors tensors = checkpoint_tensors(std::move(parameters), first, second);
  const TrainingCheckpoint state =
      checkpoints_->restore(checkpoint_dir, config_.model, layout_json(), specs_, pieces_, tensors);
  if (!device().is_host()) {
    for (size_t k = 0; k < param_tensors_.size(); ++k) param_tensors_[k].copy_from(tensors.parameters[k]);
  }
  optimizer_->import_moments(first.grads(), second.grads());
  train_loader_->seek(state.train_loader);
  completed_steps_ = state.step;
  optimizer_updates_ = state.optimizer_updates;
  if (state.loss_scale && scaler_.dynamic()) scaler_.restore(state.loss_scale->scale, state.loss_scale->finite_steps);
}

int Trainer::run() {
  StopSignals stop_signals;
  const std::filesystem::path run_dir(config_.run_dir);
  RunRecorder record({.run_dir = run_dir,
                    .total_steps = config_.steps,
                    .continued_from = completed_steps_,
                    // Under mpirun a rank's stdout can be a pseudo-terminal even when the job's output goes to a file.
                    .progress_bar = mesh_.size() == 1,
                    .tokens_per_step = config_.global_batch * config_.model.block_size,
                    .peak_flops = peak_.flops,
                    .peak_source = peak_.source},
                   world_, to_toml(config_), plan_);
  record.print(startup_banner());
  int stopped_by = 0;
  const auto start = std::chrono::steady_clock::now();
  const int64_t first_step = completed_steps_;
  if (config_.exit_at_step > 0 && config_.exit_at_step <= completed_steps_) {
    fail("key 'train.exit_at_step' ({}) is not after step {}, where this run resumes: raise it or set it to 0",
         config_.exit_at_step, completed_steps_);
  }
  bool exiting = false;
  while (completed_steps_ < config_.steps && !exiting) {
    StepMetrics metrics = step();
    const bool last = completed_steps_ == config_.steps;
    if (config_.val_every > 0 && (completed_steps_ % config_.val_every == 0 || last)) {
      metrics.val_loss = validation_loss();
    }
    metrics.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    record.record_step(metrics, completed_steps_ - first_step);
    // Every rank learns of a signal any rank got, so all stop after the same step.
    {
      trace::Span span("agree on stop", "trainer");
      stopped_by = world_.agree_on_stop(StopSignals::received());
    }
    exiting = completed_steps_ == config_.exit_at_step;
    if (last || exiting || stopped_by != 0 ||
        (config_.checkpoint_every > 0 && completed_steps_ % config_.checkpoint_every == 0)) {
      save_checkpoint();
    }
    if (stopped_by != 0) break;
  }
  if (exiting && completed_steps_ < config_.steps) {
    print(fmt::format("\nexit at step {} (train.exit_at_step) of {}; checkpoint {} saved: the same command with "
                      "train.exit_at_step raised or 0 continues the run\n",
                      completed_steps_, config_.steps, (run_dir / checkpoint_dir_name(completed_steps_)).string()));
  }
  if (stopped_by != 0) {
    print(fmt::format("\nstopped by {} after step {}; checkpoint {} saved: the same command resumes it\n",
                      strsignal(stopped_by), completed_steps_,
                      (run_dir / checkpoint_dir_name(completed_steps_)).string()));
  }
  const std::string trace_report = trace_ ? trace_->summary(finish_trace()) : "";  // every rank takes part
  record.finish(*dispatcher_, config_.backend, [this] { return coverage_json(config_op_coverage(config_)); },
                kernel_profile(), trace_report);
  return stopped_by;
}

std::optional<KernelProfile> Trainer::kernel_profile() const {
  if (!profiling_) return std::nullopt;
  const std::vector<NodeTiming>& timings = chunks_.front().train_graph->timings();
  return KernelProfile{profile_by_op(chunks_.front().train_model.graph, timings),
                       timings.empty() ? 0 : timings.front().calls};
}

void Trainer::enable_tracing(TraceOptions options) {
  trace_ = std::make_unique<TraceSession>(std::move(options), world_);
}

nlohmann::json Trainer::finish_trace() {
  if (!trace_) return {};
  return trace_->finish();
}

}  // namespace strata
