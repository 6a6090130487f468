// The pipeline schedule generator against Megatron's formulas and against a replay of every
// stage: warm-up / steady / cool-down counts, every micro-batch forward and backward exactly once
// per chunk, every send matched by one receive, no deadlock, the bubble of uniform stages equal to
// the textbook (p - 1) / (m + p - 1) of the step (1F1B) and (p - 1) / (v·m + p - 1) interleaved,
// and bad combinations refused with the reason.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "parallel/pipeline_schedule.h"
#include "support/error_text.h"

namespace strata {
namespace {

int count(const std::vector<PipelineAction>& actions, PipelineOp op) {
  int n = 0;
  for (const PipelineAction& a : actions) n += a.op == op ? 1 : 0;
  return n;
}

// Forwards before the first backward, and backwards after the last forward, read off the list:
// the warm-up and cool-down counts plus one each when there is a steady phase (its first forward
// precedes the first backward, its last backward follows the last forward).
std::pair<int, int> warmup_and_cooldown(const std::vector<PipelineAction>& actions) {
  int warmup = 0, cooldown = 0;
  bool seen_backward = false;
  int last_forward = -1;
  for (size_t i = 0; i < actions.size(); ++i) {
    if (actions[i].op == PipelineOp::Backward) seen_backward = true;
    if (actions[i].op == PipelineOp::Forward) {
      if (!seen_backward) ++warmup;
      last_forward = static_cast<int>(i);
    }
  }
  for (size_t i = static_cast<size_t>(last_forward) + 1; i < actions.size(); ++i) {
    cooldown += actions[i].op == PipelineOp::Backward ? 1 : 0;
  }
  return {warmup, cooldown};
}

TEST(PipelineSchedule, OneFOneBCountsAreMegatrons) {
  for (int p : {2, 3, 4}) {
    for (int m : {1, 2, 4, 7}) {
      auto actions = pipeline_actions(PipelineSchedule::OneFOneB, {p, m, 1, 8});
      for (int s = 0; s < p; ++s) {
        const int warmup = std::min(p - s - 1, m);
        auto [w, c] = warmup_and_cooldown(actions[s]);
        const int steady_edge = warmup < m ? 1 : 0;
        EXPECT_EQ(w, warmup + steady_edge) << "p=" << p << " m=" << m << " stage " << s;
        EXPECT_EQ(c, warmup + steady_edge) << "p=" << p << " m=" << m << " stage " << s;
        PipelinePhases phases = pipeline_phases(PipelineSchedule::OneFOneB, {p, m, 1, 8}, s);
        EXPECT_EQ(phases.warmup, warmup);
        EXPECT_EQ(phases.steady, m - warmup);
        EXPECT_EQ(count(actions[s], PipelineOp::Forward), m);
        EXPECT_EQ(count(actions[s], PipelineOp::Backward), m);
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedCountsAreMegatronsAndChunksRunInGroupsOfP) {
  for (int p : {2, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p, 3 * p}) {
        const PipelineShape shape{p, m, v, p * v};
        auto actions = pipeline_actions(PipelineSchedule::Interleaved, shape);
        for (int s = 0; s < p; ++s) {
          const int total = m * v;
          const int warmup = std::min((p - s - 1) * 2 + (v - 1) * p, total);
          PipelinePhases phases = pipeline_phases(PipelineSchedule::Interleaved, shape, s);
          EXPECT_EQ(phases.warmup, warmup) << "p=" << p << " v=" << v << " m=" << m << " stage " << s;
          EXPECT_EQ(phases.steady, total - warmup);
          auto [w, c] = warmup_and_cooldown(actions[s]);
          const int steady_edge = warmup < total ? 1 : 0;
          EXPECT_EQ(w, warmup + steady_edge);
          EXPECT_EQ(c, warmup + steady_edge);
          // The first p forwards run chunk 0 on micro-batches 0..p-1, the next p chunk 1 (when v·p
          // forwards are in the warm-up), and every (micro-batch, chunk) runs forward and backward once.
          std::vector<PipelineAction> forwards;
          std::set<std::pair<int, int>> done_forward, done_backward;
          for (const PipelineAction& a : actions[s]) {
            if (a.op == PipelineOp::Forward) {
              forwards.push_back(a);
              EXPECT_TRUE(done_forward.insert({a.micro_batch, a.chunk}).second);
            }
            if (a.op == PipelineOp::Backward) {
              EXPECT_TRUE(done_forward.count({a.micro_batch, a.chunk})) << "backward before its forward";
              EXPECT_TRUE(done_backward.insert({a.micro_batch, a.chunk}).second);
            }
          }
          EXPECT_EQ(static_cast<int>(done_backward.size()), total);
          for (int k = 0; k < std::min(p * v, total); ++k) {
            EXPECT_EQ(forwards[k].chunk, k / p);
            EXPECT_EQ(forwards[k].micro_batch, k % p);
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, EverySendIsMatchedByOneReceiveAndNoScheduleDeadlocks) {
  for (PipelineSchedule schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB, PipelineSchedule::Interleaved}) {
    for (int p : {2, 3, 4}) {
      for (int m : {p, 2 * p, 4 * p}) {
        const int v = schedule == PipelineSchedule::Interleaved ? 2 : 1;
        auto actions = pipeline_actions(schedule, {p, m, v, 8});
        // (activation?, micro-batch, from stage, from chunk, to stage, to chunk) sent and received.
        std::multiset<std::tuple<bool, int, int, int, int, int>> sends, receives;
        for (int s = 0; s < p; ++s) {
          for (const PipelineAction& a : actions[s]) {
            if (a.op == PipelineOp::SendActivation || a.op == PipelineOp::SendGradient) {
              sends.insert({a.op == PipelineOp::SendActivation, a.micro_batch, s, a.chunk, a.peer, a.peer_chunk});
            }
            if (a.op == PipelineOp::ReceiveActivation || a.op == PipelineOp::ReceiveGradient) {
              receives.insert({a.op == PipelineOp::ReceiveActivation, a.micro_batch, a.peer, a.peer_chunk, s, a.chunk});
            }
          }
        }
        EXPECT_EQ(sends, receives) << schedule_name(schedule) << " p=" << p << " m=" << m;
        // Two transfers per micro-batch and chunk boundary: p·v - 1 boundaries.
        EXPECT_EQ(static_cast<int>(sends.size()), 2 * m * (p * v - 1));
        EXPECT_NO_THROW(simulate_pipeline(actions, {std::vector<double>(p, 1.0), std::vector<double>(p, 2.0), 0.0}));
      }
    }
  }
}

TEST(PipelineSchedule, UniformStagesHaveTheTextbookBubble) {
  // Forward 1 s and backward 2 s per micro-batch per stage, free transfers: the step is
  // (m + p - 1) · 3 s under GPipe and 1F1B; interleaving divides the fill and drain by v.
  for (int p : {2, 4}) {
    for (int m : {4, 8}) {
      const PipelineTimes times{std::vector<double>(p, 1.0), std::vector<double>(p, 2.0), 0.0};
      for (PipelineSchedule schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
        PipelineSimulation sim = simulate_pipeline(pipeline_actions(schedule, {p, m, 1, 8}), times);
        EXPECT_DOUBLE_EQ(sim.step_s, 3.0 * (m + p - 1)) << schedule_name(schedule) << " p=" << p << " m=" << m;
        EXPECT_DOUBLE_EQ(sim.bubble_s / sim.step_s, (p - 1.0) / (m + p - 1.0));
      }
      const int v = 2;
      const PipelineTimes chunk_times{std::vector<double>(p, 1.0 / v), std::vector<double>(p, 2.0 / v), 0.0};
      PipelineSimulation sim = simulate_pipeline(pipeline_actions(PipelineSchedule::Interleaved, {p, m, v, 8}),
                                                 chunk_times);
      EXPECT_NEAR(sim.bubble_s, 3.0 * (p - 1.0) / v, 1e-9) << "interleaved p=" << p << " m=" << m;
    }
  }
}

void expect_error(const std::function<void()>& action, const std::string& text) {
  const std::string message = testing::error_of(action);
  EXPECT_NE(message.find(text), std::string::npos) << message;
}

TEST(PipelineSchedule, BadCombinationsAreRefusedWithTheReason) {
  expect_error([] { pipeline_actions(PipelineSchedule::Interleaved, {4, 6, 2, 16}); },
               "runs micro-batches in groups of parallel.pp (4), but a step has 6");
  expect_error([] { pipeline_actions(PipelineSchedule::Interleaved, {4, 8, 3, 8}); },
               "= 12 pipeline parts, but model.n_layer is 8");
  expect_error([] { pipeline_actions(PipelineSchedule::OneFOneB, {8, 8, 1, 4}); },
               "= 8 pipeline parts, but model.n_layer is 4");
  expect_error([] { pipeline_actions(PipelineSchedule::OneFOneB, {2, 4, 2, 8}); },
               "model chunks per stage need the interleaved schedule");
  expect_error([] { parse_schedule("zb", "key 'parallel.schedule'"); },
               "key 'parallel.schedule': pipeline schedule must be gpipe, 1f1b or interleaved, got 'zb'");
}

TEST(PipelineSchedule, ASimulationOfActionsThatWaitForEachOtherReportsTheDeadlock) {
  // Both stages receive before they send.
  const std::vector<std::vector<PipelineAction>> actions = {
      {{PipelineOp::ReceiveGradient, 0, 0, 1, 0}, {PipelineOp::SendActivation, 0, 0, 1, 0}},
      {{PipelineOp::ReceiveActivation, 0, 0, 0, 0}, {PipelineOp::SendGradient, 0, 0, 0, 0}}};
  expect_error([&] { simulate_pipeline(actions, {{1.0, 1.0}, {1.0, 1.0}, 0.0}); },
               "pipeline schedule deadlocks: stage 0: receive gradient of micro-batch 0");
}

}  // namespace
}  // namespace strata
