#include "planner/plan.h"

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

double TimeBreakdown::total() const {
  return compute + recompute + tp_comm + ep_comm + pp_comm + zero_comm + grad_accumulation + bubble + dp_comm +
         overlap_slowdown + fsdp_copies + param_gather + optimizer;
}

std::string ParallelPlan::describe() const {
  std::string text = fmt::format("dp={} tp={} pp={}{}{} mb={}x{} zero={} recompute={}", dp, tp, pp,
                                 ep > 1 ? fmt::format(" ep={}", ep) : "", sp ? " sp" : "", micro_batch, micro_batches,
                                 zero, recompute_mode_name(recompute));
  if (pp > 1) {
    text += fmt::format(" {}", schedule_name(schedule));
    if (schedule == PipelineSchedule::Interleaved) text += fmt::format(" v={}", virtual_stages);
  }
  return text;
}

}  // namespace strata
