#pragma once
// Pipeline schedules as explicit lists of actions, one list per stage: which
// micro-batch runs forward or backward on which model chunk, and every
// transfer between stages, in the order the stage does them. One function
// makes them; the runtime executes them and the planner's time simulation
// replays them, so the two agree on what a schedule is.
//
// GPipe: every forward, then every backward. 1F1B (PipeDream-flush, as
// Megatron's): stage s of p runs min(p - s - 1, m) warm-up forwards, then
// alternates one forward and one backward, then drains the remaining
// backwards. Interleaved 1F1B (Megatron's virtual pipeline): each stage holds
// v model chunks (chunk c of stage s is model part c·p + s), micro-batches
// enter in groups of p, and stage s warms up with (p - s - 1)·2 + (v - 1)·p
// forwards (capped at the m·v it runs in all).
//
// Transfers: a forward of a chunk that does not hold the model's first part
// receives its input activation from the stage holding the previous part, and
// sends its output to the next; a backward receives its output's gradient and
// sends its input's gradient the other way. Sends never block (the runtime
// posts them asynchronously); a receive waits for its matching send. Under
// these rules no schedule deadlocks (checked by simulate_pipeline).
#include <string>
#include <string_view>
#include <vector>

namespace strata {

enum class PipelineSchedule { GPipe, OneFOneB, Interleaved };
std::string_view schedule_name(PipelineSchedule schedule);  // "gpipe", "1f1b", "interleaved"
PipelineSchedule parse_schedule(std::string_view text, std::string_view what);

struct PipelineShape {
  int stages = 1;          // p
  int micro_batches = 1;   // m, per optimizer step and data-parallel replica
  int virtual_stages = 1;  // v: model chunks per stage (interleaved only)
  int layers = 1;          // transformer layers to cut into p · v parts
};

// Fails with the reason, naming the keys, when `schedule` cannot cut a model
// of `layers` layers into `stages` × `virtual_stages` parts (v·p parts for
// fewer layers, v > 1 without interleaving, interleaving one stage, ...).
void check_pipeline_layout(PipelineSchedule schedule, int stages, int virtual_stages, int layers);
// The same, and that a step's micro-batches suit the schedule (interleaved: a
// multiple of p).
void check_pipeline_shape(PipelineSchedule schedule, const PipelineShape& shape);

enum class PipelineOp { Forward, Backward, SendActivation, ReceiveActivation, SendGradient, ReceiveGradient };
std::string_view pipeline_op_name(PipelineOp op);

struct PipelineAction {
  PipelineOp op = PipelineOp::Forward;
  int micro_batch = 0;
  int chunk = 0;      // this stage's model chunk (0 without interleaving)
  int peer = -1;      // transfers: the stage on the other side
  int peer_chunk = 0; // transfers: the chunk there
  bool operator==(const PipelineAction&) const = default;
};

// The actions of every stage, stage s's at [s].
std::vector<std::vector<PipelineAction>> pipeline_actions(PipelineSchedule schedule, const PipelineShape& shape);

// Forwards before the first backward, forwards paired with backwards, and
// backwards after the last forward, on one stage (Megatron's counts).
struct PipelinePhases {
  int warmup = 0;
  int steady = 0;
  int cooldown = 0;
};
PipelinePhases pipeline_phases(PipelineSchedule schedule, const PipelineShape& shape, int stage);

// Seconds of one forward and one backward of a micro-batch per model chunk of
// each stage, and of one transfer between stages.
struct PipelineTimes {
  std::vector<double> forward;   // per stage
  std::vector<double> backward;  // per stage
  double transfer = 0;
};

struct PipelineSimulation {
  double step_s = 0;              // until the last stage finishes its last action
  std::vector<double> busy_s;     // per stage: forward and backward time
  std::vector<double> finish_s;   // per stage
  double bubble_s = 0;            // step_s less the busiest stage's compute
};

// Replays the actions of all stages: each starts when its stage is free and,
// for a receive, when the matching send finished (a transfer after the send
// starts). Fails, naming the stuck stages' next actions, if the schedule
// deadlocks or a receive has no matching send.
PipelineSimulation simulate_pipeline(const std::vector<std::vector<PipelineAction>>& actions,
                                     const PipelineTimes& times);

}  // namespace strata
