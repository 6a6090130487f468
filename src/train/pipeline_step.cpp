// A pipeline stage's share of a step: the schedule's actions for this stage
// (parallel/pipeline_schedule.h) run on the stage's compiled part of the
// model, each micro-batch in flight in its own slot of the compiled graph.
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
  const PipelineSchedule schedule = parse_schedule(config_.schedule, "key 'parallel.schedule'");
  const PipelineShape shape{pipeline_.degree(), static_cast<int>(count), 1, static_cast<int>(config_.model.n_layer)};
  const std::vector<PipelineAction> actions = pipeline_actions(schedule, shape)[static_cast<size_t>(pipeline_.stage())];
  const int first_backward = train_model_.first_backward_node, end = train_model_.graph.num_nodes();
  // Slots are taken by a micro-batch's receive or forward and given back after its backward and
  // the send of its gradient; micro-batches go forward in order on every stage.
  std::vector<int> free_slots, slot_of(static_cast<size_t>(count), -1);
  for (int slot = train_graph_->slots() - 1; slot >= 0; --slot) free_slots.push_back(slot);
  std::vector<std::vector<comm::Handle>> sends(static_cast<size_t>(train_graph_->slots()));
  pipeline_wait_s_ = 0;
  auto slot_for = [&](int micro) {
    int& slot = slot_of[static_cast<size_t>(micro)];
    if (slot < 0) {
      STRATA_CHECK(!free_slots.empty(), "pipeline stage {}: more micro-batches in flight than slots", pipeline_.stage());
      slot = free_slots.back();
      free_slots.pop_back();
      pipeline_wait_s_ += timed([&] {  // its last sends have left
        for (comm::Handle& sent : sends[static_cast<size_t>(slot)]) sent.wait();
      });
      sends[static_cast<size_t>(slot)].clear();
    }
    return slot;
  };
  std::vector<double> losses(static_cast<size_t>(count), 0.0);
  for (const PipelineAction& action : actions) {
    const int slot = slot_for(action.micro_batch);
    const size_t s = static_cast<size_t>(slot);
    switch (action.op) {
      case PipelineOp::ReceiveActivation:
        pipeline_wait_s_ += timed([&] { pipeline_.receive(slot_received_[s], action.peer); });
        break;
      case PipelineOp::ReceiveGradient:
        pipeline_wait_s_ += timed([&] { pipeline_.receive(slot_sent_grad_[s], action.peer); });
        break;
      case PipelineOp::Forward: {
        // Every stage reads the micro-batch's windows, so the data position is the same on all.
        train_loader_->next(train_model_.tokens >= 0 ? slot_tokens_[s] : tokens_,
                            train_model_.targets >= 0 ? slot_targets_[s] : targets_);
        train_graph_->run_nodes(slot, 0, first_backward);
        if (train_model_.loss >= 0) {
          losses[static_cast<size_t>(action.micro_batch)] = train_graph_->tensor(slot, train_model_.loss).item();
        }
        break;
      }
      case PipelineOp::SendActivation:
        sends[s].push_back(pipeline_.send_async(train_graph_->tensor(slot, train_model_.sent), action.peer));
        break;
      case PipelineOp::Backward: {
        const bool first = action.micro_batch == 0, last = action.micro_batch + 1 == count;
        active_slot_ = slot;
        train_graph_->run_nodes(slot, first_backward, end, [&](int node) {
          grad_sync_->after_node(node, first, last, [&](size_t parameter, Tensor& destination, bool accumulate) {
            collect_gradient(parameter, destination, accumulate);
          });
        });
        active_slot_ = 0;
        if (train_model_.received < 0) {  // a first stage sends nothing back: the slot is free
          free_slots.push_back(slot);
          slot_of[static_cast<size_t>(action.micro_batch)] = -1;
        }
        break;
      }
      case PipelineOp::SendGradient: {
        const int grad = train_model_.grads.of.at(train_model_.received);
        sends[s].push_back(pipeline_.send_async(train_graph_->tensor(slot, grad), action.peer));
        free_slots.push_back(slot);
        slot_of[static_cast<size_t>(action.micro_batch)] = -1;
        break;
      }
    }
  }
  pipeline_wait_s_ += timed([&] {
    for (std::vector<comm::Handle>& slot_sends : sends) {
      for (comm::Handle& sent : slot_sends) sent.wait();
    }
  });
  return pipeline_.from_last_stage(losses);
}

std::vector<double> Trainer::pipeline_validation(int64_t count) {
  std::vector<double> losses(static_cast<size_t>(count), 0.0);
  for (int64_t batch = 0; batch < count; ++batch) {
    val_loader_->next(tokens_, targets_);
    if (eval_model_.received >= 0) {
      Tensor received = eval_graph_->tensor(eval_model_.received);
      pipeline_.receive(received, pipeline_.stage() - 1);
    }
    eval_graph_->run();
    if (eval_model_.sent >= 0) pipeline_.send_async(eval_graph_->tensor(eval_model_.sent), pipeline_.stage() + 1).wait();
    if (eval_model_.loss >= 0) losses[static_cast<size_t>(batch)] = eval_graph_->tensor(eval_model_.loss).item();
  }
  return pipeline_.from_last_stage(losses);
}

}  // namespace strata
