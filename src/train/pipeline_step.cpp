// A pipeline stage's share of a step: the schedule's actions for this stage
// (parallel/pipeline_schedule.h) run on the stage's compiled model chunks
// (one, or parallel.virtual_stages interleaved), each micro-batch in flight on
// a chunk in its own slot of that chunk's compiled graph. The one place the trainer
// names a dimension: a pipeline's schedule orders the step's micro-batches, stage by
// stage, so it shapes the step itself, where every other dimension only changes the
// graph a rank runs (its pass) and where its parameters lie (its placement).
#include <algorithm>
#include <chrono>
#include <numeric>

#include <fmt/format.h>

#include "ops/collective_group.h"
#include "parallel/pipeline_parallel.h"

#include "train/trainer.h"

namespace strata {

namespace {

// Seconds `wait` takes (a receive).
template <typename Wait>
double timed(const Wait& wait) {
  const auto start = std::chrono::steady_clock::now();
  wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs nodes [begin, end) of `slot` but those in `skip` (the stage-boundary nodes the schedule runs
// as actions of their own).
void run_nodes_between(CompiledGraph& graph, int slot, int begin, int end,
                       std::initializer_list<const std::vector<int>*> skip,
                       const CompiledGraph::NodeHook& after_node = {}) {
  std::vector<int> cuts;
  for (const std::vector<int>* nodes : skip) {
    for (int node : *nodes) {
      if (node >= begin && node < end) cuts.push_back(node);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  for (int cut : cuts) {
    graph.run_nodes(slot, begin, cut, after_node);
    begin = cut + 1;
  }
  graph.run_nodes(slot, begin, end, after_node);
}

// Per chunk: slots are taken by a micro-batch's receive or forward and given back after its
// backward and the send of its gradient.
class SlotPools {
 public:
  SlotPools(const std::vector<int>& slots_per_chunk, int64_t micro_batches, int stage) : stage_(stage) {
    for (int slots : slots_per_chunk) {
      Pool pool;
      for (int slot = slots - 1; slot >= 0; --slot) pool.free.push_back(slot);
      pool.of.assign(static_cast<size_t>(micro_batches), -1);
      pools_.push_back(std::move(pool));
    }
  }
  int slot_for(int chunk, int micro) {
    Pool& pool = pools_[static_cast<size_t>(chunk)];
    int& slot = pool.of[static_cast<size_t>(micro)];
    if (slot < 0) {
      STRATA_CHECK(!pool.free.empty(), "pipeline stage {}: more micro-batches in flight than slots", stage_);
      slot = pool.free.back();
      pool.free.pop_back();
    }
    return slot;
  }
  void release(int chunk, int micro) {
    Pool& pool = pools_[static_cast<size_t>(chunk)];
    pool.free.push_back(pool.of[static_cast<size_t>(micro)]);
    pool.of[static_cast<size_t>(micro)] = -1;
  }

 private:
  struct Pool {
    std::vector<int> free, of;  // free slots; per micro-batch its slot or -1
  };
  std::vector<Pool> pools_;
  int stage_ = 0;
};

}  // namespace

void Trainer::check_pipeline_schedule() const {
  if (!pipelined()) return;
  check_pipeline_shape(parse_schedule(config_.schedule, "key 'parallel.schedule'"),
                       {pipeline_.degree(), static_cast<int>(config_.accumulation_steps() / parallel_.degree()),
                        static_cast<int>(config_.virtual_stages), static_cast<int>(config_.model.n_layer)});
}

int Trainer::chunks_per_stage() const { return static_cast<int>(config_.virtual_stages); }

// The planner's split of the layers when it priced this layout (its stages balance the embedding
// and head too), else an even one; interleaved, even parts of p · v. One part: the whole model.
std::vector<int> Trainer::pipeline_layer_split() const {
  const int layers = static_cast<int>(config_.model.n_layer), chunks = chunks_per_stage();
  const int parts = pipeline_.degree() * chunks;
  std::vector<int> split = plan_.chosen.layers_per_stage;
  if (chunks > 1 || static_cast<int>(split.size()) != parts ||
      std::accumulate(split.begin(), split.end(), 0) != layers ||
      std::find(split.begin(), split.end(), 0) != split.end()) {
    split = balanced_layers(parts, layers);
  }
  return split;
}

void Trainer::bind_pipeline_inputs() {
  const int64_t batch = config_.batch_size, seq = config_.model.block_size;
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
    for (int value : model.received_values) bind_placeholder(*chunk.train_graph, model.graph, value);
    if (model.loss >= 0) {
      chunk.train_graph->bind(model.grads.seed, loss_seed_);
    } else {
      for (int seed : model.grads.seeds) bind_placeholder(*chunk.train_graph, model.graph, seed);
    }
    for (int value : chunk.eval_model.received_values) {
      bind_placeholder(*chunk.eval_graph, chunk.eval_model.graph, value);
    }
  }
}

void Trainer::sum_tied_gradients() {
  if (!pipelined()) return;
  const std::vector<ParameterPlacement>& along_stages = placements_.at(pipeline_parallel_dimension().name);
  // Under ZeRO a rank's range of the tied embedding is the same on both stages: it has a bucket of its own.
  const std::vector<ParameterRange>& ranges = optimizer_->ranges();
  for (size_t r = 0; r < ranges.size(); ++r) {
    const std::vector<int>& holders = along_stages[held_[ranges[r].parameter]].holders;
    if (holders.size() < 2) continue;
    STRATA_CHECK(holders.size() == 2 && holders.front() == 0 && holders.back() == pipeline_.degree() - 1,
                 "parameter '{}' is held by {} stages; only the tied embedding is shared (first and last)",
                 specs_[held_[ranges[r].parameter]].name, holders.size());
    pipeline_.sum_tied_gradient(gradients_->range_gradients()[r]);
  }
}

std::vector<double> Trainer::from_loss_stage(std::vector<double> values) { return pipeline_.from_last_stage(std::move(values)); }

std::vector<double> Trainer::pipeline_micro_batches(int64_t count) {
  STRATA_CHECK(count == static_cast<int64_t>(step_tokens_.size()), "a pipeline step of {} micro-batches, made for {}",
               count, step_tokens_.size());
  // Every stage reads the step's windows up front, so the data position is the same on all.
  {
    trace::Span span("load batches", "data");
    for (int64_t micro = 0; micro < count; ++micro) {
      train_loader_->next(step_tokens_[static_cast<size_t>(micro)], step_targets_[static_cast<size_t>(micro)]);
    }
  }
  std::vector<int> slots_per_chunk;
  for (const ModelChunk& chunk : chunks_) slots_per_chunk.push_back(chunk.train_graph->slots());
  SlotPools slots(slots_per_chunk, count, pipeline_.stage());
  pipeline_wait_s_ = 0;
  std::vector<double> losses(static_cast<size_t>(count), 0.0);
  for (const PipelineAction& action : stage_actions_) {
    const int slot = slots.slot_for(action.chunk, action.micro_batch);
    if (run_pipeline_action(action, slot, count, losses)) slots.release(action.chunk, action.micro_batch);
  }
  {
    trace::Span span("finish sends", "trainer");
    pipeline_wait_s_ += collective_group(kPipelineDimension).finish_sends();
  }
  trace::Span span("losses from the last stage", "trainer");
  return pipeline_.from_last_stage(losses);
}

bool Trainer::run_pipeline_action(const PipelineAction& action, int slot, int64_t count, std::vector<double>& losses) {
  ModelChunk& chunk = chunks_[static_cast<size_t>(action.chunk)];
  const ModelGraph& model = chunk.train_model;
  const ModelGraph::BoundaryNodes& boundary = model.boundary;
  CompiledGraph& graph = *chunk.train_graph;
  const size_t micro = static_cast<size_t>(action.micro_batch);
  // The schedule's transfers are the graph's stage-boundary nodes, run when it says: every value
  // crossing the boundary in transfer order, as the peer stage runs its matching nodes.
  auto run_transfers = [&](const std::vector<int>& nodes) {
    for (int node : nodes) graph.run_nodes(slot, node, node + 1);
  };
  const int part = action.chunk * pipeline_.degree() + pipeline_.stage();
  auto observe = [&](int node) {
    if (node_observer_ && action.micro_batch == 0) node_observer_({graph, model, slot, part, node});
  };
  trace::Span span(pipeline_op_name(action.op), "trainer");
  if (span) span.set_args(fmt::format(R"({{"micro_batch":{},"chunk":{},"slot":{}}})", action.micro_batch, action.chunk, slot));
  switch (action.op) {
    case PipelineOp::ReceiveActivation:
      pipeline_wait_s_ += timed([&] { run_transfers(boundary.receives); });
      return false;
    case PipelineOp::ReceiveGradient:
      pipeline_wait_s_ += timed([&] { run_transfers(boundary.receive_gradients); });
      return false;
    case PipelineOp::Forward:
      if (model.tokens >= 0) graph.tensor(slot, model.tokens).copy_from(step_tokens_[micro]);
      if (model.targets >= 0) graph.tensor(slot, model.targets).copy_from(step_targets_[micro]);
      run_nodes_between(graph, slot, 0, model.first_backward_node, {&boundary.receives, &boundary.sends}, observe);
      if (model.loss >= 0) {
        losses[micro] = graph.tensor(slot, model.loss).item();
        router_tally_.add(graph, slot);
      }
      return false;
    case PipelineOp::SendActivation:
      run_transfers(boundary.sends);
      return false;
    case PipelineOp::Backward: {
      const bool first = action.micro_batch == 0, last = action.micro_batch + 1 == count;
      active_chunk_ = action.chunk;
      active_slot_ = slot;
      run_nodes_between(graph, slot, model.first_backward_node, model.graph.num_nodes(),
                        {&boundary.receive_gradients, &boundary.send_gradients}, [&](int node) {
                          gradients_->after_node(chunk.node_offset + node, first, last,
                                                        [&](size_t parameter, Tensor& destination, bool accumulate) {
                                                          collect_gradient(parameter, destination, accumulate);
                                                        });
                          observe(node);
                        });
      active_chunk_ = active_slot_ = 0;
      return model.received < 0;  // nothing to send back
    }
    case PipelineOp::SendGradient:
      run_transfers(boundary.send_gradients);
      return true;
  }
  return false;
}

std::vector<double> Trainer::pipeline_validation(int64_t count) {
  std::vector<double> losses(static_cast<size_t>(count), 0.0);
  for (int64_t batch = 0; batch < count; ++batch) {
    val_loader_->next(tokens_, targets_);
    // Chunk c holds model part c·pp + stage: its receive waits for part c·pp + stage - 1.
    for (ModelChunk& chunk : chunks_) {
      chunk.eval_graph->run();
      if (chunk.eval_model.loss >= 0) losses[static_cast<size_t>(batch)] = chunk.eval_graph->tensor(chunk.eval_model.loss).item();
    }
    collective_group(kPipelineDimension).finish_sends();
  }
  return pipeline_.from_last_stage(losses);
}

}  // namespace strata
