#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

namespace {

// Forward or backward number k of a stage (0-based, in the order the stage runs them) as a
// (micro-batch, chunk): without interleaving, micro-batch k of chunk 0; interleaved, Megatron's
// order: groups of p micro-batches pass through chunk 0, then chunk 1, ..., (backwards through the
// chunks in reverse).
std::pair<int, int> work_item(PipelineSchedule schedule, const PipelineShape& shape, int k, bool forward) {
  if (schedule != PipelineSchedule::Interleaved) return {k, 0};
  const int p = shape.stages, v = shape.virtual_stages;
  const int in_group = k % (p * v);
  int chunk = in_group / p;
  if (!forward) chunk = v - 1 - chunk;
  return {(k / (p * v)) * p + in_group % p, chunk};
}

struct Part {
  int stage = 0;
  int chunk = 0;
};

// Model part q = c·p + s lives on stage q mod p as chunk q / p.
Part part_at(int part, int stages) { return {part % stages, part / stages}; }

}  // namespace

std::string_view schedule_name(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::GPipe: return "gpipe";
    case PipelineSchedule::OneFOneB: return "1f1b";
    case PipelineSchedule::Interleaved: return "interleaved";
  }
  return "?";
}

PipelineSchedule parse_schedule(std::string_view text, std::string_view what) {
  for (PipelineSchedule s : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB, PipelineSchedule::Interleaved}) {
    if (text == schedule_name(s)) return s;
  }
  fail("{}: pipeline schedule must be gpipe, 1f1b or interleaved, got '{}'", what, text);
}

std::string_view pipeline_op_name(PipelineOp op) {
  switch (op) {
    case PipelineOp::Forward: return "forward";
    case PipelineOp::Backward: return "backward";
    case PipelineOp::SendActivation: return "send activation";
    case PipelineOp::ReceiveActivation: return "receive activation";
    case PipelineOp::SendGradient: return "send gradient";
    case PipelineOp::ReceiveGradient: return "receive gradient";
  }
  return "?";
}

void check_pipeline_layout(PipelineSchedule schedule, int stages, int virtual_stages, int layers) {
  const int p = stages, v = virtual_stages;
  if (p < 1) fail("key 'parallel.pp' must be at least 1, got {}", p);
  if (v < 1) fail("key 'parallel.virtual_stages' must be at least 1, got {}", v);
  if (schedule != PipelineSchedule::Interleaved && v != 1) {
    fail("key 'parallel.virtual_stages' is {} but parallel.schedule is \"{}\": model chunks per stage need the "
         "interleaved schedule",
         v, schedule_name(schedule));
  }
  if (schedule == PipelineSchedule::Interleaved && p < 2) {
    fail("key 'parallel.schedule' = \"interleaved\" needs parallel.pp of at least 2, got {}", p);
  }
  if (p * v > layers) {
    fail("parallel.pp ({}) × parallel.virtual_stages ({}) = {} pipeline parts, but model.n_layer is {}: every part "
         "needs at least one layer",
         p, v, p * v, layers);
  }
}

void check_pipeline_shape(PipelineSchedule schedule, const PipelineShape& shape) {
  check_pipeline_layout(schedule, shape.stages, shape.virtual_stages, shape.layers);
  const int p = shape.stages, m = shape.micro_batches;
  if (m < 1) fail("a pipeline needs at least one micro-batch per step, got {}", m);
  if (schedule == PipelineSchedule::Interleaved && m % p != 0) {
    fail("parallel.schedule = \"interleaved\" runs micro-batches in groups of parallel.pp ({}), but a step has {} "
         "per replica (train.global_batch / (train.batch_size × data-parallel ranks)): not a multiple",
         p, m);
  }
}

PipelinePhases pipeline_phases(PipelineSchedule schedule, const PipelineShape& shape, int stage) {
  const int p = shape.stages, m = shape.micro_batches, v = shape.virtual_stages;
  const int total = schedule == PipelineSchedule::Interleaved ? m * v : m;
  int warmup = total;
  if (schedule == PipelineSchedule::OneFOneB) warmup = std::min(p - stage - 1, m);
  if (schedule == PipelineSchedule::Interleaved) warmup = std::min((p - stage - 1) * 2 + (v - 1) * p, total);
  return {warmup, total - warmup, warmup};
}

std::vector<std::vector<PipelineAction>> pipeline_actions(PipelineSchedule schedule, const PipelineShape& shape) {
  check_pipeline_shape(schedule, shape);
  const int p = shape.stages, parts = shape.stages * shape.virtual_stages;
  std::vector<std::vector<PipelineAction>> actions(static_cast<size_t>(p));
  for (int stage = 0; stage < p; ++stage) {
    std::vector<PipelineAction>& list = actions[static_cast<size_t>(stage)];
    const PipelinePhases phases = pipeline_phases(schedule, shape, stage);
    list.reserve(static_cast<size_t>(6) * (phases.warmup + phases.steady));  // at most 3 actions per pass
    auto forward = [&](int k) {
      auto [micro, chunk] = work_item(schedule, shape, k, /*forward=*/true);
      const int part = chunk * p + stage;
      if (part > 0) {
        Part from = part_at(part - 1, p);
        list.push_back({PipelineOp::ReceiveActivation, micro, chunk, from.stage, from.chunk});
      }
      list.push_back({PipelineOp::Forward, micro, chunk});
      if (part + 1 < parts) {
        Part to = part_at(part + 1, p);
        list.push_back({PipelineOp::SendActivation, micro, chunk, to.stage, to.chunk});
      }
    };
    auto backward = [&](int k) {
      auto [micro, chunk] = work_item(schedule, shape, k, /*forward=*/false);
      const int part = chunk * p + stage;
      if (part + 1 < parts) {
        Part from = part_at(part + 1, p);
        list.push_back({PipelineOp::ReceiveGradient, micro, chunk, from.stage, from.chunk});
      }
      list.push_back({PipelineOp::Backward, micro, chunk});
      if (part > 0) {
        Part to = part_at(part - 1, p);
        list.push_back({PipelineOp::SendGradient, micro, chunk, to.stage, to.chunk});
      }
    };
    for (int k = 0; k < phases.warmup; ++k) forward(k);
    for (int i = 0; i < phases.steady; ++i) {
      forward(phases.warmup + i);
      backward(i);
    }
    for (int i = phases.steady; i < phases.steady + phases.cooldown; ++i) backward(i);
  }
  return actions;
}

namespace {

// Transfers in flight during a replay, each named by (activation?, micro-batch, receiving stage,
// receiving chunk) and holding when its data arrives. A flat table over the names the actions use:
// the planner replays schedules of ~10^5 actions many times per search, and a tree of transfers
// spent most of that time allocating and rebalancing.
class TransferArrivals {
 public:
  explicit TransferArrivals(const std::vector<std::vector<PipelineAction>>& actions)
      : stages_(static_cast<int>(actions.size())) {
    for (const std::vector<PipelineAction>& stage : actions) {
      for (const PipelineAction& a : stage) {
        STRATA_CHECK(a.micro_batch >= 0 && a.chunk >= 0 && a.peer_chunk >= 0,
                     "pipeline action with a negative micro-batch or chunk");
        micro_batches_ = std::max(micro_batches_, a.micro_batch + 1);
        chunks_ = std::max({chunks_, a.chunk + 1, a.peer_chunk + 1});
      }
    }
    arrival_.assign(size_t{2} * micro_batches_ * stages_ * chunks_, kNotSent);
  }

  // A second send of a transfer not yet received replaces the first.
  void put(bool activation, int micro_batch, int stage, int chunk, double arrival) {
    STRATA_CHECK(stage >= 0 && stage < stages_, "pipeline transfer to stage {} of {}", stage, stages_);
    double& slot = arrival_[index(activation, micro_batch, stage, chunk)];
    if (slot == kNotSent) ++pending_;
    slot = arrival;
  }

  // When the transfer arrives, forgetting it; nothing while it has not been sent.
  std::optional<double> take(bool activation, int micro_batch, int stage, int chunk) {
    double& slot = arrival_[index(activation, micro_batch, stage, chunk)];
    if (slot == kNotSent) return std::nullopt;
    const double arrival = slot;
    slot = kNotSent;
    --pending_;
    return arrival;
  }

  size_t pending() const { return pending_; }

 private:
  static constexpr double kNotSent = -std::numeric_limits<double>::infinity();

  size_t index(bool activation, int micro_batch, int stage, int chunk) const {
    return ((size_t{activation} * micro_batches_ + micro_batch) * stages_ + stage) * chunks_ + chunk;
  }

  int stages_ = 0, micro_batches_ = 0, chunks_ = 0;
  std::vector<double> arrival_;
  size_t pending_ = 0;
};

}  // namespace

PipelineSimulation simulate_pipeline(const std::vector<std::vector<PipelineAction>>& actions,
                                     const PipelineTimes& times) {
  const size_t p = actions.size();
  STRATA_CHECK(times.forward.size() == p && times.backward.size() == p, "pipeline times for {} stages, {} given", p,
               times.forward.size());
  TransferArrivals sent(actions);
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0.0);
  PipelineSimulation result;
  result.busy_s.assign(p, 0.0);
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (size_t s = 0; s < p; ++s) {
      while (next[s] < actions[s].size()) {
        const PipelineAction& a = actions[s][next[s]];
        const int stage = static_cast<int>(s);
        if (a.op == PipelineOp::ReceiveActivation || a.op == PipelineOp::ReceiveGradient) {
          const std::optional<double> arrived =
              sent.take(a.op == PipelineOp::ReceiveActivation, a.micro_batch, stage, a.chunk);
          if (!arrived) break;  // waits for the matching send
          clock[s] = std::max(clock[s], *arrived);
        } else if (a.op == PipelineOp::SendActivation || a.op == PipelineOp::SendGradient) {
          sent.put(a.op == PipelineOp::SendActivation, a.micro_batch, a.peer, a.peer_chunk, clock[s] + times.transfer);
        } else {
          const double seconds = a.op == PipelineOp::Forward ? times.forward[s] : times.backward[s];
          clock[s] += seconds;
          result.busy_s[s] += seconds;
        }
        ++next[s];
        progressed = true;
      }
    }
  }
  std::string stuck;
  for (size_t s = 0; s < p; ++s) {
    if (next[s] == actions[s].size()) continue;
    const PipelineAction& a = actions[s][next[s]];
    stuck += fmt::format("{}stage {}: {} of micro-batch {} (chunk {}) from stage {}", stuck.empty() ? "" : "; ", s,
                         pipeline_op_name(a.op), a.micro_batch, a.chunk, a.peer);
  }
  if (!stuck.empty()) fail("pipeline schedule deadlocks: {}", stuck);
  if (sent.pending() > 0) fail("pipeline schedule: {} transfer(s) sent but never received", sent.pending());
  result.finish_s = clock;
  result.step_s = *std::max_element(clock.begin(), clock.end());
  result.bubble_s = result.step_s - *std::max_element(result.busy_s.begin(), result.busy_s.end());
  return result;
}

}  // namespace strata
