#pragma once
// A parallel layout and what the cost model predicts for it.
#include <string>
#include <string_view>
#include <vector>

#include "planner/dimension_degrees.h"
#include "planner/workload.h"

namespace strata {

// Devices are ordered by the dimensions' nesting (parallel/parallel_dimension.h): tensor-parallel
// rank fastest, then expert-parallel, then data-parallel, then pipeline stage (Megatron's order
// with the runtime's ep between tp and dp), filling a node before the next.
struct ParallelPlan {
  DimensionDegrees degrees;       // every registered dimension's degree
  DimensionOptionValues options;  // every dimension's options, through its part's accessors (plan_dimension.h)
  int64_t micro_batch = 1;        // rows per micro-batch
  int64_t micro_batches = 1;      // per optimizer step and batch-splitting replica (dp x ep)
  int zero = 0;                   // 0: replicated; 1: optimizer state; 2: + gradients; 3: + weights sharded over dp
  RecomputeMode recompute = RecomputeMode::None;

  int degree(std::string_view dimension) const { return degrees[dimension]; }
  int devices() const { return degrees.product(); }
  // "dp=8 tp=8 pp=4 sp mb=1x96 zero=1 recompute=selective 1f1b" ("... pp=4 ep=2 ..." under expert
  // parallelism); also the tie-break order.
  std::string describe() const;
  bool operator==(const ParallelPlan& other) const = default;
};

// Seconds per optimizer step, attributed as on the slowest pipeline stage.
struct TimeBreakdown {
  double compute = 0;            // forward and backward kernels
  double recompute = 0;          // forward kernels (and collectives) redone in backward
  // Each dimension's communication in the stages' time, not overlapped (PlannerDimension::micro_batch_comm:
  // tensor/sequence-parallel collectives, expert-parallel all-to-alls; the pipeline's transfers between stages).
  DimensionSeconds comm;
  double zero_comm = 0;          // per-micro-batch ZeRO-2/3 collectives not hidden behind compute
  double grad_accumulation = 0;  // adding each micro-batch's gradients into the accumulators
  double bubble = 0;             // pipeline fill and drain
  // The gradient reduction not hidden behind the last backward pass, under the dimension that reports it
  // (PlannerDimension::reduces_gradients: data parallelism).
  DimensionSeconds reduction;
  double overlap_slowdown = 0;   // compute slowed by the data-parallel and ZeRO collectives running beside it
  double fsdp_copies = 0;        // FSDP's copies around its collectives (fsdp_copies.h)
  double param_gather = 0;       // ZeRO-1/2 all-gather of the updated weights
  double optimizer = 0;          // clipping and AdamW
  double total() const;
};

// Bytes on the device with the highest peak.
struct MemoryBreakdown {
  int stage = 0;
  double weights = 0;      // compute-dtype weights
  double master = 0;       // fp32 master weights (mixed precision)
  double gradients = 0;    // fp32 gradient accumulators
  double optimizer = 0;    // AdamW moments
  double activations = 0;  // saved activations of the micro-batches in flight, plus backward temporaries
  double staging = 0;      // one micro-batch's gradients before they are accumulated (or its ZeRO bucket)
  double buffers = 0;      // ZeRO-3 gathered weights
  double peak = 0;         // weights + master + gradients + optimizer + buffers + max(activations, staging)
  double capacity = 0;     // usable device memory
};

struct Prediction {
  ParallelPlan plan;
  std::vector<int> layers_per_stage;  // per device stage, summed over its virtual chunks
  double step_s = 0;
  double tokens_per_s = 0;
  // model FLOPs (forward + backward, no recomputation; a mixture of experts' active experts only) /
  // (step * devices * matrix peak)
  double mfu = 0;
  double hardware_flops = 0;  // per step, all devices: model FLOPs plus the forward work recomputation redoes
  TimeBreakdown time;
  bool schedule_replayed = false;       // the pipeline time replays the schedule (else a closed form)
  MemoryBreakdown memory;               // the stage with the highest peak
  std::vector<MemoryBreakdown> stages;  // every pipeline stage
  bool fits() const { return memory.peak <= memory.capacity; }
};

}  // namespace strata
