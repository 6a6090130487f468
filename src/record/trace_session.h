#pragma once
// `strata train --trace FILE [--trace-steps A:B]`: the profiler timeline (core/trace.h) of the
// steps a run names, recorded on every rank, merged by the reporting rank into one Chrome
// trace-event file, with the gap analysis of each traced step beside it.
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/trace.h"
#include "parallel/job_world.h"

namespace strata {

// Steps [first, end) (numbered as metrics.jsonl numbers them, from 1; end 0: to the end of the
// run), with what runs after each traced step (validation, checkpoint save).
struct TraceOptions {
  std::string path;
  int64_t first_step = 1;
  int64_t end_step = 0;
  bool includes(int64_t step) const { return step >= first_step && (end_step == 0 || step < end_step); }
};
// "A:B" (inclusive-exclusive), "A:" (from A to the end) or "A" (step A alone); errors name the flag.
TraceOptions parse_trace_steps(const std::string& text);

class TraceSession {
 public:
  // Installs this rank's tracer; recording starts with the first traced step.
  TraceSession(TraceOptions options, JobWorld& world);

  void before_step(int64_t step) { tracer_->set_recording(options_.includes(step)); }
  // Called by every rank: writes the trace (each rank's part beside it, merged by the reporting
  // rank once all are written) and returns the merged trace there (null elsewhere, or when a rank
  // could not write its part). Nothing records afterwards.
  nlohmann::json finish();
  // The reporting rank's text on a merged trace; writes the gap analysis file beside it.
  std::string summary(const nlohmann::json& merged) const;

 private:
  TraceOptions options_;
  JobWorld& world_;
  std::unique_ptr<trace::Tracer> tracer_;
};

}  // namespace strata
