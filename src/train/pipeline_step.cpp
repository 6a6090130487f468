// A pipeline stage's share of a step: the schedule's actions for this stage
// (parallel/pipeline_schedule.h) run on the stage's compiled model chunks
// (one, or parallel.virtual_stages interleaved), each micro-batch in flight on
// a chunk in its own slot of that chunk's compiled graph.
#include <chrono>

#include "train/trainer.h"

namespace strata {

namespace {

// Seconds `wait` takes (a receive, or the completion of sends).
template <typename Wait>
double timed(const Wait& wait) {
  const auto start = std::chrono::steady_clock::now();
  wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<double> Trainer::pipeline_micro_batches(int64_t count) {
  STRATA_CHECK(count == static_cast<int64_t>(step_tokens_.size()), "a pipeline step of {} micro-batches, made for {}",
               count, step_tokens_.size());
  // Every stage reads the step's windows up front, so the data position is the same on all.
  for (int64_t micro = 0; micro < count; ++micro) {
    train_loader_->next(step_tokens_[static_cast<size_t>(micro)], step_targets_[static_cast<size_t>(micro)]);
  }
  // Per chunk: slots are taken by a micro-batch's receive or forward and given back after its
  // backward and the send of its gradient.
  struct Slots {
    std::vector<int> free, of;  // free slots; per micro-batch its slot or -1
  };
  std::vector<Slots> slots(chunks_.size());
  for (size_t c = 0; c < chunks_.size(); ++c) {
    for (int slot = chunks_[c].train_graph->slots() - 1; slot >= 0; --slot) slots[c].free.push_back(slot);
    slots[c].of.assign(static_cast<size_t>(count), -1);
  }
  // A send leaves from its own copy, so no action ever waits for one before the step's end (as the
  // schedule's replay assumes: waiting for a send inside the step can deadlock two stages that each
  // wait for the other to receive).
  struct Send {
    Tensor data;
    comm::Handle handle;
  };
  std::vector<Send> sends;
  auto send = [&](const Tensor& value, int peer, PipelineFlow flow) {
    Send& pending = sends.emplace_back();
    pending.data = value.clone();
    pending.handle = pipeline_.send_async(pending.data, peer, flow);
  };
  pipeline_wait_s_ = 0;
  auto slot_for = [&](int chunk, int micro) {
    Slots& pool = slots[static_cast<size_t>(chunk)];
    int& slot = pool.of[static_cast<size_t>(micro)];
    if (slot < 0) {
      STRATA_CHECK(!pool.free.empty(), "pipeline stage {}: more micro-batches in flight than slots", pipeline_.stage());
      slot = pool.free.back();
      pool.free.pop_back();
    }
    return slot;
  };
  auto release = [&](int chunk, int micro) {
    Slots& pool = slots[static_cast<size_t>(chunk)];
    pool.free.push_back(pool.of[static_cast<size_t>(micro)]);
    pool.of[static_cast<size_t>(micro)] = -1;
  };
  std::vector<double> losses(static_cast<size_t>(count), 0.0);
  for (const PipelineAction& action : stage_actions_) {
    ModelChunk& chunk = chunks_[static_cast<size_t>(action.chunk)];
    const GPT2Graph& model = chunk.train_model;
    CompiledGraph& graph = *chunk.train_graph;
    const int slot = slot_for(action.chunk, action.micro_batch);
    const size_t s = static_cast<size_t>(slot), micro = static_cast<size_t>(action.micro_batch);
    switch (action.op) {
      case PipelineOp::ReceiveActivation:
        pipeline_wait_s_ += timed([&] { pipeline_.receive(chunk.slot_received[s], action.peer); });
        break;
      case PipelineOp::ReceiveGradient:
        pipeline_wait_s_ += timed(
            [&] { pipeline_.receive(chunk.slot_sent_grad[s], action.peer, PipelineFlow::Gradients); });
        break;
      case PipelineOp::Forward:
        if (model.tokens >= 0) graph.tensor(slot, model.tokens).copy_from(step_tokens_[micro]);
        if (model.targets >= 0) graph.tensor(slot, model.targets).copy_from(step_targets_[micro]);
        graph.run_nodes(slot, 0, model.first_backward_node);
        if (model.loss >= 0) losses[micro] = graph.tensor(slot, model.loss).item();
        break;
      case PipelineOp::SendActivation:
        send(graph.tensor(slot, model.sent), action.peer, PipelineFlow::Activations);
        break;
      case PipelineOp::Backward: {
        const bool first = action.micro_batch == 0, last = action.micro_batch + 1 == count;
        active_chunk_ = action.chunk;
        active_slot_ = slot;
        graph.run_nodes(slot, model.first_backward_node, model.graph.num_nodes(), [&](int node) {
          grad_sync_->after_node(chunk.node_offset + node, first, last,
                                 [&](size_t parameter, Tensor& destination, bool accumulate) {
                                   collect_gradient(parameter, destination, accumulate);
                                 });
        });
        active_chunk_ = active_slot_ = 0;
        if (model.received < 0) release(action.chunk, action.micro_batch);  // nothing to send back
        break;
      }
      case PipelineOp::SendGradient:
        send(graph.tensor(slot, model.grads.of.at(model.received)), action.peer, PipelineFlow::Gradients);
        release(action.chunk, action.micro_batch);
        break;
    }
  }
  pipeline_wait_s_ += timed([&] {
    for (Send& pending : sends) pending.handle.wait();
  });
  return pipeline_.from_last_stage(losses);
}

std::vector<double> Trainer::pipeline_validation(int64_t count) {
  const int p = pipeline_.degree(), parts = p * static_cast<int>(chunks_.size());
  std::vector<double> losses(static_cast<size_t>(count), 0.0);
  for (int64_t batch = 0; batch < count; ++batch) {
    val_loader_->next(tokens_, targets_);
    // Model part q = c·p + stage: its input comes from part q - 1, its output goes to part q + 1.
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const GPT2Graph& model = chunks_[c].eval_model;
      CompiledGraph& graph = *chunks_[c].eval_graph;
      const int part = static_cast<int>(c) * p + pipeline_.stage();
      if (model.received >= 0) {
        Tensor received = graph.tensor(model.received);
        pipeline_.receive(received, (part - 1) % p);
      }
      graph.run();
      if (model.sent >= 0 && part + 1 < parts) pipeline_.send_async(graph.tensor(model.sent), (part + 1) % p).wait();
      if (model.loss >= 0) losses[static_cast<size_t>(batch)] = graph.tensor(model.loss).item();
    }
  }
  return pipeline_.from_last_stage(losses);
}

}  // namespace strata
