#include "train/trainer.h"

#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <set>
#include <thread>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "backends/backends.h"
#include "ckpt/hf_weights.h"
#include "core/file_io.h"
#include "core/json_file.h"
#include "core/median.h"
#include "core/trace_analysis.h"
#include "data/corpus.h"
#include "data/token_shard.h"
#include "graph/profile_report.h"
#include "model/family.h"
#include "train/ops_record.h"
#include "train/stop_signals.h"

namespace strata {

namespace {

std::set<int> kept_values(const ModelGraph& model) {
  std::set<int> kept;
  for (int value : {model.loss, model.sent}) {
    if (value >= 0) kept.insert(value);
  }
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

// Peak resident memory of this process so far (Linux reports KiB).
double peak_rss_mib_of_this_process() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

size_t bucket_bytes(const TrainConfig& config) { return static_cast<size_t>(config.bucket_mb * (1 << 20)); }

std::vector<Tensor> tensors_of(ParameterSet& params) {
  std::vector<Tensor> tensors;
  for (size_t i = 0; i < params.size(); ++i) tensors.push_back(params.tensor(i));
  return tensors;
}

std::vector<Shape> shapes_of(const ParameterSet& params) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < params.size(); ++i) shapes.push_back(params.spec(i).shape);
  return shapes;
}

// Refuses, before anything is allocated, a model whose weights, gradients and
// AdamW state alone cannot fit in this machine's memory with every rank on it.
TrainConfig fits_in_memory(TrainConfig config, const DataParallel& parallel) {
  config.validate();
  const double parameters =
      static_cast<double>(config.model.num_parameters()) / static_cast<double>(config.tp * config.pp);
  const int ranks = parallel.ranks_on_this_host();
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


// The [model] keys whose values differ, "model.n_embd = 64 there, 32 here": every key of
// model_fields, the list ModelConfig's equality covers.
std::string model_difference(ModelConfig there, ModelConfig here) {
  std::string text;
  const std::vector<ModelField> theirs = model_fields(there), ours = model_fields(here);
  for (size_t i = 0; i < ours.size(); ++i) {
    std::visit(
        [&](auto* value) {
          const auto& other = *std::get<decltype(value)>(theirs[i].value);
          if (other != *value) {
            text += fmt::format("{}model.{} = {} there, {} here", text.empty() ? "" : "; ", ours[i].key, other, *value);
          }
        },
        ours[i].value);
  }
  return text;
}

template <typename T>
std::vector<T> held_of(const std::vector<T>& all, const std::vector<size_t>& held) {
  std::vector<T> part;
  for (size_t index : held) part.push_back(all[index]);
  return part;
}

}  // namespace

// Builds the model's graph as this rank runs it: whole, or its tensor-parallel and pipeline part.
ModelGraph build_rank_model(const TrainConfig& config, bool training, const RankLayout& layout) {
  ModelBuildOptions options = model_build_options(config, training);
  options.separate_head_copy = true;
  if (layout.tp.degree > 1 || layout.part.parts() > 1) {
    const ModelFamily& family = model_family(config.model);
    options.parallelize = [layout, plan = family.sharding_plan(),
                           prefix = std::string(family.layer_prefix())](const Graph& forward) {
      return parallelize_forward(forward, plan, prefix, layout);
    };
  }
  return build_model_graph(config.model, config.batch_size, config.model.block_size, training, options);
}

Trainer::Trainer(TrainConfig config, DataParallel parallel, TensorParallel tensor, PipelineParallel pipeline)
    : config_(fits_in_memory(std::move(config), parallel)),
      parallel_(std::move(parallel)),
      tensor_(std::move(tensor)),
      pipeline_(std::move(pipeline)),
      specs_(model_param_specs(config_.model)),
      shards_(parameter_shards(specs_, model_family(config_.model).sharding_plan(), tensor_.graph_rank())),
      schedule_{config_.lr, config_.lr_min, config_.warmup_steps, config_.steps},
      dispatcher_(make_dispatcher(config_.backend, parse_fallback_policy(config_.fallback), config_.device)),
      scaler_(loss_scale_settings(config_)) {
  parallel_.check_ranks_agree(to_toml(config_));
  if (const DType low = config_.precision_policy().low; !device().capabilities().computes(low) && !config_.emulate) {
    std::vector<std::string> native;
    for (DType dtype : device().capabilities().native_dtypes) native.emplace_back(dtype_name(dtype));
    fail("precision.compute = \"{}\": {} has no {} arithmetic (it computes {}); set ops.emulate = true to compute "
         "it in f32 there, rounding each result to {} (reported as emulated), or use another precision",
         dtype_name(low), device().name(), dtype_name(low), fmt::join(native, ", "), dtype_name(low));
  }
  if (!device().is_host() && (tensor_.degree() > 1 || pipeline_.degree() > 1 || config_.zero > 0)) {
    fail("ops.backend = \"{}\" runs on {}: tensor and pipeline parallelism and ZeRO do not run on a device yet "
         "(their collectives read host memory); data parallelism with parallel.zero = 0 does",
         config_.backend, device().name());
  }
  STRATA_CHECK(tensor_.degree() == config_.tp && pipeline_.degree() == config_.pp,
               "a tensor-parallel group of {} and a pipeline of {} for parallel.tp = {} and parallel.pp = {}",
               tensor_.degree(), pipeline_.degree(), config_.tp, config_.pp);
  // 0: one process on every core, as the runtime's default (and a profile's largest measured count).
  const int ranks = parallel_.degree() * tensor_.degree() * pipeline_.degree();
  const int plan_threads = config_.threads > 0 || ranks > 1 ? threads_per_rank(config_, parallel_.ranks_on_this_host()) : 0;
  if (plan_threads > 0) omp_set_num_threads(plan_threads);
  AppliedPlan applied;
  const MeshShape mesh{.dp = parallel_.degree(), .tp = tensor_.degree(), .pp = pipeline_.degree()};
  if (config_.plan == "auto") applied = apply_auto_plan(config_, mesh, plan_threads);
  if (config_.accumulation_steps() % parallel_.degree() != 0) {
    fail("key 'train.global_batch' ({}) must be a multiple of train.batch_size ({}) times the {} data-parallel "
         "ranks, so that every rank runs the same number of micro-batches",
         config_.global_batch, config_.batch_size, parallel_.degree());
  }
  if (pipeline_.degree() > 1) {
    check_pipeline_shape(parse_schedule(config_.schedule, "key 'parallel.schedule'"),
                         {pipeline_.degree(), static_cast<int>(config_.accumulation_steps() / parallel_.degree()),
                          static_cast<int>(config_.virtual_stages), static_cast<int>(config_.model.n_layer)});
  }
  if (config_.plan != "auto") {
    applied = describe_manual_plan(config_, mesh, plan_threads);
  }
  plan_ = std::move(applied.plan);
  plan_summary_ = std::move(applied.summary);
  peak_ = peak_flops(config_, ranks, plan_threads);
  const int64_t batch = config_.batch_size;
  const int64_t seq = config_.model.block_size;

  // The planner's split of the layers when it priced this layout (its stages balance the embedding
  // and head too), else an even one; interleaved, even parts of p · v.
  const int layers = static_cast<int>(config_.model.n_layer), chunks = static_cast<int>(config_.virtual_stages);
  const int parts = pipeline_.degree() * chunks;
  std::vector<int> split = plan_.chosen.layers_per_stage;
  if (chunks > 1 || static_cast<int>(split.size()) != parts ||
      std::accumulate(split.begin(), split.end(), 0) != layers ||
      std::find(split.begin(), split.end(), 0) != split.end()) {
    split = balanced_layers(parts, layers);
  }
  TensorParallelRank tp_rank = tensor_.graph_rank();
  tp_rank.sequence_parallel = config_.sp;
  layers_per_stage_ = split;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const RankLayout layout{tp_rank, {chunk * pipeline_.degree() + pipeline_.stage(), split, chunks}};
    chunks_.push_back({build_rank_model(config_, /*training=*/true, layout),
                       build_rank_model(config_, /*training=*/false, layout)});
  }
  // What this rank holds: the parameters its chunks read (the tied embedding through either copy),
  // and the gradients it collects: one per parameter, plus the LM head's copy of the tied embedding
  // when the embedding's is here too (one process, or a one-stage pipeline).
  const std::string tied = model_family(config_.model).tied_embedding(config_.model);
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].name == tied) tied_index_ = i;
  }
  const size_t tied_index = tied_index_.value_or(specs_.size());
  for (size_t i = 0; i < specs_.size(); ++i) {
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const ModelGraph& model = chunks_[static_cast<size_t>(chunk)].train_model;
      for (int value : {model.params[i], i == tied_index ? model.head_copy : -1}) {
        if (value < 0) continue;
        if (!held_.empty() && held_.back() == i) {  // the head's copy, beside the embedding's
          STRATA_CHECK(i == tied_index && value == model.head_copy, "parameter '{}' in two chunks of one stage",
                       specs_[i].name);
          head_copy_entry_ = entries_.size();
          entries_.push_back({held_.size() - 1, chunk, value});
          continue;
        }
        held_.push_back(i);
        entries_.push_back({held_.size() - 1, chunk, value});
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
  holders_ = pipeline_.holders(specs_.size(), held_);
  checkpoint_pieces_ = checkpoint_pieces(specs_, model_family(config_.model).sharding_plan(), mesh, holders_);
  params_ = ParameterSet(shard_specs(held_of(specs_, held_), held_of(shards_, held_)), device());
  param_tensors_ = tensors_of(params_);

  std::vector<Shape> entry_shapes = shapes_of(params_);
  std::vector<size_t> alone;  // the tied embedding's entries get buckets of their own
  for (size_t k = 0; k < held_.size(); ++k) {
    if (holders_[held_[k]].size() > 1 || (head_copy_entry_ && held_[k] == tied_index)) alone.push_back(k);
  }
  entry_tensors_ = param_tensors_;
  if (head_copy_entry_) {
    entry_shapes.push_back(entry_shapes[entries_[*head_copy_entry_].param]);
    entry_tensors_.push_back(param_tensors_[entries_[*head_copy_entry_].param]);
    alone.push_back(*head_copy_entry_);
  }
  reduction_ = GradientReduction::choose(
      parallel_.degree(), config_.zero, config_.accumulation_steps() / parallel_.degree(),
      GradientBuckets(entry_shapes, bucket_bytes(config_), parallel_.degree(), GradientStorage::layout_only(), alone));
  reduction_.storage.device = &device();
  grad_buckets_ = std::make_unique<GradientBuckets>(entry_shapes, bucket_bytes(config_), parallel_.degree(),
                                                    reduction_.storage, alone);
  std::vector<ParameterRange> entry_ranges = ZeroPartition::whole(entry_shapes);
  std::vector<Tensor> entry_grads;
  if (reduction_.sharded_optimizer) {
    zero_.emplace(*grad_buckets_, parallel_.rank());
    entry_ranges = zero_->owned();
    entry_grads = zero_->gradients();
  } else {
    entry_grads = ZeroPartition::gradients_of(grad_buckets_->grads(), entry_ranges);
  }
  // The optimizer updates the parameters' ranges; the head copy's ranges (the same elements: both
  // tied entries have buckets of their own) are added to the embedding's after the reduction.
  std::vector<ParameterRange> ranges;
  for (size_t r = 0; r < entry_ranges.size(); ++r) {
    if (head_copy_entry_ && entry_ranges[r].parameter == *head_copy_entry_) {
      head_copy_grads_.push_back(entry_grads[r]);
      continue;
    }
    ranges.push_back(entry_ranges[r]);
    range_grads_.push_back(entry_grads[r]);
  }
  if (head_copy_entry_) {
    for (size_t r = 0, h = 0; r < ranges.size(); ++r) {
      if (ranges[r].parameter != entries_[*head_copy_entry_].param) continue;
      STRATA_CHECK(h < head_copy_grads_.size() && head_copy_grads_[h].numel() == ranges[r].length,
                   "the LM head's copy of the tied embedding is split unlike the embedding");
      head_copy_targets_.push_back(r);
      ++h;
    }
    STRATA_CHECK(head_copy_targets_.size() == head_copy_grads_.size(), "{} ranges of the tied embedding, {} of its copy",
                 head_copy_targets_.size(), head_copy_grads_.size());
  }
  optimizer_.emplace(params_, adamw_settings(config_), ranges);

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
  train_loader_ = std::make_unique<TokenLoader>(corpus.train_shards, batch, seq, config_.model.vocab_size);
  val_loader_ = std::make_unique<TokenLoader>(corpus.val_shards, batch, seq, config_.model.vocab_size);

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
  bind_inputs();
  keep_weight_copies();
  std::vector<int> ready_after;
  for (const GradientEntry& entry : entries_) {
    const ModelChunk& chunk = chunks_[static_cast<size_t>(entry.chunk)];
    ready_after.push_back(chunk.node_offset + chunk.train_model.graph.value(chunk.train_model.grads.of.at(entry.value)).producer);
  }
  grad_sync_ = std::make_unique<GradientSync>(parallel_, *grad_buckets_, reduction_, ready_after, nodes);

  std::filesystem::path run_dir(config_.run_dir);
  if (parallel_.reports()) {
    run_lock_.emplace(run_dir, "run directory (checkpoint.dir)");
    remove_stale_temporaries(run_dir);  // of saves killed midway; the lock rules out live ones
  }
  const bool resumable = config_.resume && has_checkpoints(run_dir);
  if (!config_.resume && has_checkpoints(run_dir)) {
    fail("key 'checkpoint.dir': '{}' already holds checkpoints of an earlier run; set checkpoint.resume = true "
         "to continue it, or choose another directory",
         run_dir.string());
  }
  if (resumable) {
    restore(resolve_checkpoint(run_dir));
  } else {
    initialise_parameters();
  }
}

void Trainer::keep_weight_copies() {
  const DType low = config_.precision_policy().low;
  if (low == DType::F32 || zero_ || chunks_.size() != 1) return;
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
  if (pipeline_.degree() == 1) {
    chunks_.front().train_graph->bind(chunks_.front().train_model.grads.seed, loss_seed_);
    return;
  }
  const int64_t micro_batches = config_.accumulation_steps() / parallel_.degree();
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    step_tokens_.push_back(Tensor::empty({batch, seq}, DType::I32));
    step_targets_.push_back(Tensor::empty({batch, seq}, DType::I32));
  }
  // A chunk keeps the micro-batches in flight in its own slots: at most the stage's warm-up plus one.
  const PipelineShape shape{pipeline_.degree(), static_cast<int>(micro_batches), static_cast<int>(chunks_.size()),
                            static_cast<int>(config_.model.n_layer)};
  const PipelineSchedule schedule = parse_schedule(config_.schedule, "key 'parallel.schedule'");
  stage_actions_ = pipeline_actions(schedule, shape)[static_cast<size_t>(pipeline_.stage())];
  const PipelinePhases phases = pipeline_phases(schedule, shape, pipeline_.stage());
  const int slots = static_cast<int>(std::min<int64_t>(phases.warmup + 1, micro_batches));
  for (ModelChunk& chunk : chunks_) {
    const ModelGraph& model = chunk.train_model;
    chunk.train_graph->set_slots(slots);
    for (int slot = 0; slot < slots; ++slot) {
      auto bind_new = [&](std::vector<Tensor>& buffers, int value) {
        const TensorMeta& meta = model.graph.value(value).meta;
        buffers.push_back(Tensor::empty(meta.shape, meta.dtype));
        chunk.train_graph->bind(slot, value, buffers.back());
      };
      if (model.tokens >= 0) bind_new(chunk.slot_tokens, model.tokens);
      if (model.targets >= 0) bind_new(chunk.slot_targets, model.targets);
    }
    // The values the stage-boundary receives stand for are never read: one placeholder serves every slot.
    auto bind_placeholder = [](CompiledGraph& graph, const Graph& g, int value) {
      const TensorMeta& meta = g.value(value).meta;
      graph.bind(value, Tensor::empty(meta.shape, meta.dtype));
    };
    if (model.received >= 0) bind_placeholder(*chunk.train_graph, model.graph, model.received);
    if (model.loss >= 0) {
      chunk.train_graph->bind(model.grads.seed, loss_seed_);
    } else {
      bind_placeholder(*chunk.train_graph, model.graph, model.grads.seed);
    }
    if (chunk.eval_model.received >= 0) {
      bind_placeholder(*chunk.eval_graph, chunk.eval_model.graph, chunk.eval_model.received);
    }
  }
}

void Trainer::initialise_parameters() {
  if (tensor_.degree() == 1 && pipeline_.degree() == 1) {
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
    shards_[held_[k]].slice(whole, params_.tensor(k));
  }
}

void Trainer::keep_held(const std::vector<Tensor>& whole, std::vector<Tensor>& held) const {
  for (size_t k = 0; k < held_.size(); ++k) shards_[held_[k]].slice(whole[held_[k]], held[k]);
}

ExactSquareSum Trainer::gradient_square_sum() {
  // Split parameters' squares are summed over the tensor-parallel group; replicated ones are the
  // same on every rank of it and count once; so is the tied embedding on the later of its stages.
  std::vector<Tensor> split, replicated;
  const std::vector<ParameterRange>& ranges = optimizer_->ranges();
  for (size_t r = 0; r < ranges.size(); ++r) {
    const size_t index = held_[ranges[r].parameter];
    if (holders_[index].front() != pipeline_.stage()) continue;
    (shards_[index].split() ? split : replicated).push_back(range_grads_[r]);
  }
  ExactSquareSum squares = square_sum(replicated, *dispatcher_);
  if (tensor_.degree() > 1) squares.merge(tensor_.sum(square_sum(split, *dispatcher_)));
  if (zero_) squares = parallel_.sum(squares);
  return pipeline_.sum(squares);
}

void Trainer::sum_tied_gradients() {
  if (pipeline_.degree() == 1) return;
  // Under ZeRO a rank's range of the tied embedding is the same on both stages: it has a bucket of its own.
  const std::vector<ParameterRange>& ranges = optimizer_->ranges();
  for (size_t r = 0; r < ranges.size(); ++r) {
    const std::vector<int>& holders = holders_[held_[ranges[r].parameter]];
    if (holders.size() < 2) continue;
    STRATA_CHECK(holders.size() == 2 && holders.front() == 0 && holders.back() == pipeline_.degree() - 1,
                 "parameter '{}' is held by {} stages; only the tied embedding is shared (first and last)",
                 specs_[held_[ranges[r].parameter]].name, holders.size());
    pipeline_.sum_tied_gradient(range_grads_[r]);
  }
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
    const Tensor* destination = grad_sync_->collected_into(e);
    // Staged buckets; the head copy's gradient, not kept (kept_values) but collected as soon as it is made.
    if (!destination || e == head_copy_entry_) continue;
    if (in_buckets) {
      chunk.train_graph->bind(0, grad, *destination);
    } else {
      chunk.train_graph->unbind(0, grad);
    }
  }
  gradients_in_buckets_ = in_buckets;
}

StepMetrics Trainer::step() {
  if (tracer_) tracer_->set_recording(trace_options_.includes(completed_steps_ + 1));
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
  std::vector<double> losses;
  if (pipeline_.degree() > 1) {
    losses = pipeline_micro_batches(share.count);
  } else {
    for (int64_t micro = 0; micro < share.count; ++micro) {
      const bool first = micro == 0, last = micro + 1 == share.count;
      // A captured micro-batch keeps the graph's own gradients: the reduction may be writing the buckets.
      place_gradients(first && !node_observer_);
      trace::Span span("micro-batch", "trainer");
      if (span) span.set_args(fmt::format(R"({{"micro_batch":{}}})", share.first + micro));
      losses.push_back(run_micro_batch(*chunks_.front().train_graph, chunks_.front().train_model, *train_loader_,
                                       [&](int node) {
        grad_sync_->after_node(node, first, last, [&](size_t parameter, Tensor& destination, bool accumulate) {
          collect_gradient(parameter, destination, accumulate);
        });
        if (node_observer_ && first) node_observer_({*chunks_.front().train_graph, chunks_.front().train_model, 0, 0, node});
      }));
    }
  }
  train_loader_->skip(micro_batches - share.first - share.count);
  node_observer_ = {};
  double comm_wait_s = 0;
  {
    trace::Span span("gradient sync", "trainer");
    comm_wait_s = grad_sync_->finish();
    // The LM head's copy joins the embedding's gradient once, after both are summed over ranks.
    for (size_t h = 0; h < head_copy_grads_.size(); ++h) {
      Tensor& target = range_grads_[head_copy_targets_[h]];
      dispatcher_->run("add", {target, head_copy_grads_[h]}, {target});
    }
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
  if (pipeline_.degree() > 1) metrics.pipeline_wait_s = pipeline_wait_s_;
  // Unscaling, the norm, clipping, the update and ZeRO's all-gather of the updated parameters.
  std::optional<trace::Span> optimizer_span(std::in_place, "optimizer", "optimizer");
  if (loss_scale != 1.0) {
    for (Tensor& grad : range_grads_) dispatcher_->run("scale", {grad}, {grad}, {{"factor", 1.0 / loss_scale}});
  }
  // Exact, so a sharded optimizer's ranks find the norm (and skip or clip) exactly as one process does.
  metrics.grad_norm = std::sqrt(gradient_square_sum().value());
  if (scaler_.dynamic()) metrics.loss_scale = loss_scale;
  const bool finite = std::isfinite(metrics.grad_norm);
  if (scaler_.update(finite) && finite) {
    ++optimizer_updates_;
    optimizer_->update(params_, range_grads_, metrics.lr, optimizer_updates_,
                       clip_factor(metrics.grad_norm, config_.grad_clip), *dispatcher_);
    weight_copies_fresh_ = true;  // refreshed by the update where there are any
    if (zero_) zero_->all_gather_parameters(parallel_, entry_tensors_);
    consecutive_skips_ = 0;
  } else {
    // One bad batch must not poison every weight, in any precision; many in a row is a diverged run.
    metrics.skipped = true;
    metrics.skip_reason = scaler_.dynamic() ? fmt::format("inf/nan gradients at loss scale {:g}, now {:g}",
                                                          loss_scale, scaler_.scale())
                                            : "inf/nan gradients";
    if (++consecutive_skips_ > config_.max_skipped_steps) {
      fail("step {}: {} steps in a row had inf/nan gradients (train.max_skipped_steps = {}); the first parameter "
           "with a non-finite gradient is {}: the run has diverged (lower train.lr, or check the data)",
           metrics.step, consecutive_skips_, config_.max_skipped_steps, first_nonfinite_gradient());
    }
    print(fmt::format("step {}: skipped, {}\n", metrics.step, metrics.skip_reason));
  }
  optimizer_span.reset();
  completed_steps_ = metrics.step;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t tokens = config_.global_batch * config_.model.block_size;
  metrics.tokens_per_s = static_cast<double>(tokens) / seconds;
  metrics.tokens = metrics.step * tokens;
  if (peak_.flops > 0) metrics.mfu = model_flops_per_token() * metrics.tokens_per_s / peak_.flops;
  return metrics;
}

double Trainer::model_flops_per_token() const {
  return model_family(config_.model).training_flops_per_token(config_.model);
}

std::string Trainer::first_nonfinite_gradient() {
  const std::vector<ParameterRange>& ranges = optimizer_->ranges();
  double first = static_cast<double>(params_.size());
  for (size_t r = 0; r < ranges.size(); ++r) {
    if (!std::isfinite(square_sum({range_grads_[r]}, *dispatcher_).value())) {
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
  std::vector<double> losses;
  if (pipeline_.degree() > 1) {
    losses = pipeline_validation(share.count);
  } else {
    for (int64_t batch = 0; batch < share.count; ++batch) {
      losses.push_back(run_micro_batch(*chunks_.front().eval_graph, chunks_.front().eval_model, *val_loader_));
    }
  }
  double total = 0;
  for (double loss : parallel_.gather(losses, config_.val_batches)) total += loss;
  return total / static_cast<double>(config_.val_batches);
}

void Trainer::print(const std::string& text) const {
  if (parallel_.reports()) fmt::print("{}", text);
}

GradientBuckets Trainer::whole_moments_scratch() const { return GradientBuckets(shapes_of(params_), bucket_bytes(config_)); }

RankTensors Trainer::checkpoint_tensors(std::vector<Tensor> parameters, GradientBuckets& first_moments,
                                        GradientBuckets& second_moments) {
  return {held_, std::move(parameters), first_moments.grads(), second_moments.grads()};
}

nlohmann::json Trainer::layout_json() const {
  return {{"dp", parallel_.degree()}, {"tp", tensor_.degree()},          {"pp", pipeline_.degree()},
          {"sp", config_.sp},         {"zero", config_.zero},            {"virtual_stages", config_.virtual_stages},
          {"schedule", config_.schedule}};
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
  GradientBuckets first = whole_moments_scratch(), second = whole_moments_scratch();
  optimizer_->export_moments(first.grads(), second.grads());
  if (zero_) {
    for (GradientBuckets* moments : {&first, &second}) {
      for (size_t b = 0; b < moments->size(); ++b) parallel_.sum_async(moments->bucket(b)).wait();
    }
  }
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
  // Every rank writes the pieces it holds; rank 0 (which owns the run directory) commits.
  const auto start = std::chrono::steady_clock::now();
  const std::filesystem::path saved = save_training_checkpoint(
      config_.run_dir, state, specs_, checkpoint_pieces_, parallel_.world_rank(),
      checkpoint_tensors(host_copies(param_tensors_), first, second),
      static_cast<int>(config_.checkpoint_keep), [this](bool mine) { return parallel_.all_succeeded(mine); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!parallel_.reports()) return;
  double bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(saved)) bytes += static_cast<double>(entry.file_size());
  print(fmt::format("checkpoint {}: {:.1f} MiB in {:.3f} s ({:.0f} MB/s, every rank's files, fsynced)\n",
                    saved.filename().string(), bytes / (1 << 20), seconds, bytes / seconds / 1e6));
}

void Trainer::restore(const std::filesystem::path& checkpoint_dir) {
  Checkpoint checkpoint(checkpoint_dir);
  TrainingCheckpoint state = read_training_checkpoint(checkpoint);
  if (state.model != config_.model) {
    fail("checkpoint '{}' holds another model: {}", checkpoint.dir().string(),
         model_difference(state.model, config_.model));
  }
  GradientBuckets first = whole_moments_scratch(), second = whole_moments_scratch();
  // Each rank reads the boxes its shards cover, whatever layout saved them.
  const auto start = std::chrono::steady_clock::now();
  // On a device the parameters are read into host tensors, then copied there.
  std::vector<Tensor> parameters = param_tensors_;
  if (!device().is_host()) {
    for (Tensor& parameter : parameters) parameter = Tensor::empty(parameter.shape(), parameter.dtype());
  }
  const RankTensors tensors = checkpoint_tensors(std::move(parameters), first, second);
  load_training_tensors(checkpoint, specs_, shards_, tensors);
  if (!device().is_host()) {
    for (size_t k = 0; k < param_tensors_.size(); ++k) param_tensors_[k].copy_from(tensors.parameters[k]);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double bytes = 0;
  for (const std::vector<Tensor>* kind : {&tensors.parameters, &tensors.first_moments, &tensors.second_moments}) {
    for (const Tensor& tensor : *kind) bytes += static_cast<double>(tensor.nbytes());
  }
  optimizer_->import_moments(first.grads(), second.grads());
  train_loader_->seek(state.train_loader);
  completed_steps_ = state.step;
  optimizer_updates_ = state.optimizer_updates;
  if (state.loss_scale && scaler_.dynamic()) scaler_.restore(state.loss_scale->scale, state.loss_scale->finite_steps);
  // Every rank reads its own boxes at once: the job's rate is all their bytes over the slowest.
  const double all_mib = parallel_.over_world(bytes / (1 << 20), comm::ReduceOp::Sum);
  const double slowest = parallel_.over_world(seconds, comm::ReduceOp::Max);
  print(fmt::format("resumed from {} at step {} (every rank read {:.1f} MiB in {:.3f} s, {:.0f} MB/s){}\n",
                    checkpoint.dir().string(), completed_steps_, all_mib, slowest, all_mib * (1 << 20) / slowest / 1e6,
                    state.layout.is_object() && state.layout != layout_json()
                        ? fmt::format(" (saved under {}, resharded to this run's layout)", state.layout.dump())
                        : ""));
}

std::string Trainer::precision_summary() const {
  PrecisionPolicy policy = config_.precision_policy();
  std::string text = fmt::format("precision: {}", config_.precision);
  if (policy.low != DType::F32) {
    std::string kept;
    for (const std::string& op : policy.fp32_ops) kept += (kept.empty() ? "" : ", ") + op;
    text += fmt::format(" (f32 master weights and AdamW state; ops kept in f32: {}{})", kept.empty() ? "none" : kept,
                        scaler_.dynamic() ? fmt::format("; dynamic loss scale from {:g}", scaler_.scale()) : "");
  }
  text += fmt::format("; recompute: {}; fusion: {}\n", config_.recompute, config_.fuse ? "on" : "off");
  // Which op types of the training graph the backend cannot run natively in the dtype they got.
  std::map<Route, std::set<std::string>> not_native;
  // On a device, what the ref fallbacks will copy between it and the host per step.
  int64_t transfers = 0;
  double transfer_bytes = 0;
  const CompiledGraph& graph = *chunks_.front().train_graph;
  for (size_t node = 0; node < graph.kernel_choices().size(); ++node) {
    const KernelChoice& choice = graph.kernel_choices()[node];
    if (choice.route != Route::Native) {
      not_native[choice.route].insert(fmt::format("{} ({})", choice.schema->name, dtype_name(choice.dtype)));
    }
    if (choice.route != Route::Reference) continue;
    const Node& op = graph.graph().node(static_cast<int>(node));
    Metas inputs, outputs;
    for (int value : op.inputs) inputs.push_back(graph.graph().value(value).meta);
    for (int value : op.outputs) outputs.push_back(graph.graph().value(value).meta);
    const TransferTotals copies = copies_of_route(choice.route, device(), inputs, outputs);
    transfers += config_.accumulation_steps() * copies.count;
    transfer_bytes += static_cast<double>(config_.accumulation_steps()) * static_cast<double>(copies.bytes);
  }
  for (const auto& [route, ops] : not_native) {
    std::string list;
    for (const std::string& op : ops) list += (list.empty() ? "" : ", ") + op;
    text += route == Route::Emulated
                ? fmt::format("backend '{}' has no native arithmetic for {}: they run in f32 and are rounded back\n",
                              config_.backend, list)
                : fmt::format("backend '{}' has no kernel for {}: they run {}\n", config_.backend, list,
                              route_name(route));
  }
  if (transfers > 0) {
    text += fmt::format("the ref fallbacks copy {} tensors ({:.3f} MB) per step between the host and {}\n",
                        transfers / parallel_.degree(), transfer_bytes / parallel_.degree() / 1e6, device().name());
  }
  return text;
}

int Trainer::run() {
  StopSignals stop_signals;
  std::filesystem::path run_dir(config_.run_dir);
  std::optional<MetricsLog> log;
  if (parallel_.reports()) {
    std::filesystem::create_directories(run_dir);
    write_file_atomic(run_dir / "config.toml", to_toml(config_));
    write_plan_record(run_dir, plan_);
    // Under mpirun a rank's stdout can be a pseudo-terminal even when the job's output goes to a file.
    log.emplace((run_dir / "metrics.jsonl").string(), config_.steps,
                /*progress_bar=*/parallel_.degree() * tensor_.degree() * pipeline_.degree() == 1,
                completed_steps_);
  }
  print(fmt::format("model: {} {} layers, {} heads, width {}, vocab {}, context {} ({:.2f}M parameters)\n",
                    config_.model.family, config_.model.n_layer, config_.model.n_head, config_.model.n_embd,
                    config_.model.vocab_size,
                    config_.model.block_size, static_cast<double>(config_.model.num_parameters()) / 1e6));
  if (pipeline_.degree() > 1) {
    print(fmt::format("pipeline parallel: {} stages ({} schedule, {} micro-batches per step and replica; layers per "
                      "stage {}{}; the first stage also runs the embedding, the last the head and loss; the tied "
                      "embedding's two copies' gradients are summed)\n",
                      pipeline_.degree(), config_.schedule, config_.accumulation_steps() / parallel_.degree(),
                      fmt::join(layers_per_stage_, "+"),
                      plan_.chosen.layers_per_stage == layers_per_stage_ ? ", the planner's split" : ""));
  }
  if (tensor_.degree() > 1) {
    print(fmt::format("tensor parallel: {} ranks per layer (Megatron's split: QKV and MLP input projections by "
                      "columns, {} heads each; output projections by rows; the embedding and the loss by vocabulary "
                      "shards of up to {} rows){}; {:.2f}M parameters "
                      "per rank\n",
                      tensor_.degree(), config_.model.n_head / tensor_.degree(),
                      vocab_shard(config_.model, tensor_.degree()),
                      config_.sp ? fmt::format("; sequence parallel: norms and residuals on {} positions per rank",
                                               config_.model.block_size / tensor_.degree())
                                 : "",
                      static_cast<double>(params_.count()) / 1e6));
  }
  if (parallel_.degree() > 1) {
    print(fmt::format("data parallel: {} ranks, micro-batches of {} rows, {} per rank per step; {} bucket(s) of up "
                      "to {:g} MiB, {}; ZeRO-{}: gradient buffers {:.2f} MiB, optimizer state {:.2f} MiB per rank\n",
                      parallel_.degree(), config_.batch_size, config_.accumulation_steps() / parallel_.degree(),
                      grad_buckets_->size(), config_.bucket_mb, reduction_.describe(), config_.zero,
                      static_cast<double>(grad_buckets_->bytes()) / (1 << 20),
                      static_cast<double>(optimizer_->state_bytes()) / (1 << 20)));
  }
  print(fmt::format("backend: {} ({} threads{}); arena {:.1f} MiB (unshared {:.1f} MiB)\n", config_.backend,
                    omp_get_max_threads(), parallel_.degree() > 1 ? " per rank" : "",
                    static_cast<double>(arena_bytes()) / (1 << 20),
                    static_cast<double>(chunks_.front().train_graph->memory_plan().unshared_bytes) / (1 << 20)));
  print(precision_summary());
  print(plan_summary_);
  print(peak_.flops > 0 ? fmt::format("model FLOPs utilisation (MFU) against the {}: {:.3g} TFLOP/s\n",
                                       peak_.source, peak_.flops / 1e12)
                         : "no MFU: set parallel.cluster to a cluster file (a preset, or the one `strata calibrate` writes) to "
                           "report model FLOPs utilisation\n");

  std::vector<double> step_seconds, comm_waits, pipeline_waits;
  int stopped_by = 0;
  auto start = std::chrono::steady_clock::now();
  int64_t first_step = completed_steps_;
  if (config_.exit_at_step > 0 && config_.exit_at_step <= completed_steps_) {
    fail("key 'train.exit_at_step' ({}) is not after step {}, where this run resumes: raise it or set it to 0",
         config_.exit_at_step, completed_steps_);
  }
  bool exiting = false;
  bool peak_doubted = false;
  while (completed_steps_ < config_.steps && !exiting) {
    StepMetrics metrics = step();
    if (metrics.mfu && *metrics.mfu > 1 && !peak_doubted) {
      peak_doubted = true;  // a utilisation above 100% means the described peak is wrong, not the run
      print(fmt::format("warning: MFU {:.0f}% at step {}: this run beats the {} ({:.3g} TFLOP/s), so that figure "
                        "is too low for this machine; `strata calibrate` measures one to use as parallel.cluster\n",
                        100 * *metrics.mfu, metrics.step, peak_.source, peak_.flops / 1e12));
    }
    if (metrics.comm_wait_s) comm_waits.push_back(*metrics.comm_wait_s);
    if (metrics.pipeline_wait_s) pipeline_waits.push_back(*metrics.pipeline_wait_s);
    step_seconds.push_back(static_cast<double>(config_.global_batch * config_.model.block_size) / metrics.tokens_per_s);
    bool last = completed_steps_ == config_.steps;
    if (config_.val_every > 0 && (completed_steps_ % config_.val_every == 0 || last)) {
      metrics.val_loss = validation_loss();
    }
    metrics.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (log) log->record(metrics, completed_steps_ - first_step);
    // Every rank learns of a signal any rank got, so all stop after the same step.
    {
      trace::Span span("agree on stop", "trainer");
      stopped_by = parallel_.agree_on_stop(StopSignals::received());
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
  std::string trace_report;
  if (tracer_) trace_report = trace_summary(finish_trace());  // every rank takes part
  std::vector<double> peak_rss_mib = parallel_.gather({peak_rss_mib_of_this_process()}, parallel_.degree());
  if (!log) return stopped_by;  // the reporting rank prints the summaries
  log->finish();
  if (step_seconds.size() > 1) {
    // Medians after the first step (which pays first-touch costs) are the measured figures.
    double step_s = median_after_first(step_seconds);
    nlohmann::json more = {{"peak_rss_mib_per_rank", peak_rss_mib}};
    if (comm_waits.size() > 1) more["comm_wait_s"] = median_after_first(comm_waits);
    if (pipeline_waits.size() > 1) more["pipeline_wait_s"] = median_after_first(pipeline_waits);
    record_measured_step(run_dir, step_s, static_cast<int64_t>(step_seconds.size() - 1), more);
    std::string versus = plan_.record["chosen"].contains("step_s")
                             ? fmt::format("; predicted {:.4f} s (measured / predicted {:.2f})", plan_.chosen.step_s,
                                           step_s / plan_.chosen.step_s)
                             : "";
    fmt::print("measured {:.4f} s/step (median of {} steps after the first){}; peak memory {:.0f} MiB per rank\n",
               step_s, step_seconds.size() - 1, versus, *std::max_element(peak_rss_mib.begin(), peak_rss_mib.end()));
  }
  std::vector<OpProfileRow> profile;
  int64_t profiled_runs = 0;
  if (profiling_) {
    const std::vector<NodeTiming>& timings = chunks_.front().train_graph->timings();
    profiled_runs = timings.empty() ? 0 : timings.front().calls;
    profile = profile_by_op(chunks_.front().train_model.graph, timings);
    fmt::print("training graph, kernel time per op over {} runs (the first pays first-touch costs):\n{}",
               profiled_runs, format_op_profile(profile, profiled_runs));
  }
  const int64_t steps_run = static_cast<int64_t>(step_seconds.size());
  write_ops_record(run_dir, config_op_coverage(config_), dispatcher_->records(), dispatcher_->transfers(), steps_run,
                   profile, profiled_runs);
  std::string fallbacks = dispatcher_->summary();
  fmt::print("{}", fallbacks.empty() ? "every op ran natively on backend '" + config_.backend + "'\n" : fallbacks);
  if (const TransferTotals moved = dispatcher_->transfer_totals(); moved.count > 0 && steps_run > 0) {
    const double per_step = 1.0 / static_cast<double>(steps_run);
    fmt::print("host-device transfers of the ops above: {:.1f} tensors, {:.3f} MB, {:.2f} ms per step\n",
               static_cast<double>(moved.count) * per_step, static_cast<double>(moved.bytes) * per_step / 1e6,
               moved.seconds * per_step * 1e3);
  }
  fmt::print("{}", trace_report);
  return stopped_by;
}

TraceOptions parse_trace_steps(const std::string& text) {
  auto number = [&](std::string_view part) {
    int64_t value = 0;
    auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || error != std::errc() || end != part.data() + part.size()) {
      fail("--trace-steps '{}': expected A:B (steps A to B-1, numbered from 1 as in metrics.jsonl), A: or A", text);
    }
    return value;
  };
  TraceOptions options;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    options.first_step = number(text);
    options.end_step = options.first_step + 1;
  } else {
    const std::string_view view(text);
    options.first_step = colon == 0 ? 1 : number(view.substr(0, colon));
    options.end_step = colon + 1 == text.size() ? 0 : number(view.substr(colon + 1));
  }
  if (options.first_step < 1) fail("--trace-steps '{}': steps are numbered from 1", text);
  if (options.end_step != 0 && options.end_step <= options.first_step) {
    fail("--trace-steps '{}': B must be after A (A:B traces steps A to B-1)", text);
  }
  return options;
}

void Trainer::enable_tracing(TraceOptions options) {
  if (options.path.empty()) fail("--trace: give the file to write the timeline to");
  trace_options_ = std::move(options);
  tracer_ = std::make_unique<trace::Tracer>(parallel_.world_rank());
  tracer_->install();  // recording starts with the first traced step
}

nlohmann::json Trainer::finish_trace() {
  if (!tracer_) return {};
  tracer_->set_recording(false);
  const int rank = parallel_.world_rank(), ranks = parallel_.world_size();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  // A common instant right after a barrier over the world: lines up ranks on hosts whose clocks differ.
  parallel_.all_succeeded(true);
  const double sync_us = trace::now_us();
  nlohmann::json mine = tracer_->to_json({{"rank", rank},
                                          {"host", host},
                                          {"clock_sync_us", sync_us},
                                          {"steps", fmt::format("{}:{}", trace_options_.first_step,
                                                                trace_options_.end_step == 0
                                                                    ? std::string()
                                                                    : std::to_string(trace_options_.end_step))}});
  tracer_.reset();  // uninstalled: nothing records from here on
  const std::string& path = trace_options_.path;
  auto part_path = [&](int r) { return trace::sibling_path(path, fmt::format(".rank{}.json", r)); };
  // Every rank but the first writes its part beside the trace (the run directory's rule: a
  // filesystem every rank sees); the first merges them once every rank has written.
  std::string problem;
  if (!parallel_.reports()) {
    try {
      write_file_atomic(part_path(rank), mine.dump());
    } catch (const std::exception& error) {
      problem = error.what();
    }
    if (!problem.empty()) fmt::print(stderr, "trace: rank {} could not write its part: {}\n", rank, problem);
  }
  const bool every_part = parallel_.all_succeeded(problem.empty());
  if (!parallel_.reports()) return {};
  if (!every_part) {
    fmt::print(stderr, "trace: not written: a rank could not write its part of '{}' (its message says why)\n", path);
    return {};
  }
  std::vector<nlohmann::json> parts;
  parts.push_back(std::move(mine));
  for (int r = 1; r < ranks; ++r) parts.push_back(read_json_file(part_path(r)));
  nlohmann::json merged = trace::merge_traces(parts);
  write_file_atomic(path, merged.dump());
  for (int r = 1; r < ranks; ++r) std::filesystem::remove(part_path(r));
  return merged;
}

std::string Trainer::trace_summary(const nlohmann::json& merged) const {
  if (merged.is_null()) return "";
  const std::vector<trace::StepGaps> steps = trace::analyse_steps(merged);
  const std::string gaps_path = trace::sibling_path(trace_options_.path, ".gaps.json");
  write_file_atomic(gaps_path, trace::gaps_to_json(steps).dump(2));
  size_t spans = 0;
  std::set<int> ranks;
  for (const nlohmann::json& event : merged["traceEvents"]) {
    spans += event.value("ph", "") == "X";
    ranks.insert(event.value("pid", 0));
  }
  std::set<int64_t> traced;
  for (const trace::StepGaps& gaps : steps) traced.insert(gaps.step);
  return fmt::format("trace: {} ({} spans, {} rank(s), steps {}; open in https://ui.perfetto.dev or "
                     "chrome://tracing); gap analysis also in {}\n{}",
                     trace_options_.path, spans, ranks.size(),
                     traced.empty() ? std::string("none") : fmt::format("{}-{}", *traced.begin(), *traced.rbegin()),
                     gaps_path, trace::format_gap_analysis(steps));
}

}  // namespace strata
