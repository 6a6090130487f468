#pragma once
// The training job's configuration: a TOML file plus `--set key=value`
// overrides, read strictly with core's TomlReader (unknown keys, wrong types
// and impossible values are errors naming the key, and the file or `--set`).
#include <cstdint>
#include <string>
#include <vector>

#include "graph/autocast.h"
#include "model/model_graph.h"
#include "ops/sum_order.h"
#include "parallel/parallel_settings.h"

namespace strata {

// The parallel.* keys are the dimensions' own (ParallelSettings: dp, tp, sp, pp, ep, schedule, ...),
// declared and checked with each dimension's registration; this struct adds the rest of the job.
struct TrainConfig : ParallelSettings {
  ModelConfig model;
  // model.init_from: HuggingFace weights: a safetensors file, or a model directory whose config.json
  // also fills the [model] keys not given (given ones must agree)
  std::string init_from;

  std::string data_dir = "data/kjv";  // output of `strata data prepare`
  // data.train / data.val: token shards as paths or globs (llm.c's own files,
  // no meta.json needed), instead of data.dir; the vocabulary is the model's.
  std::string train_shards, val_shards;

  std::string backend = "cpu";
  std::string device;             // ops.device: which device of the backend (opencl: an index or a name substring)
  // ops.emulate: allow precision.compute in a dtype the device has no arithmetic for, computed in f32
  bool emulate = false;
  std::string fallback = "warn";  // ops.fallback
  int64_t threads = 0;            // 0: every core
  bool fuse = true;               // ops.fuse: fusion passes (residual+LayerNorm, element-wise chains)
  std::string sum_order = "natural";  // ops.sum_order (ops/sum_order.h): "permuted" is a diagnostic

  int64_t seed = 1337;
  int64_t batch_size = 8;     // rows per micro-batch; columns = model.block_size
  int64_t global_batch = 8;   // rows per optimizer step (gradient accumulation)
  int64_t steps = 1000;
  // Save and end the run after this step (0: never), the schedules still those of `steps`: a long
  // run split over several allocations follows one run's trajectory (Megatron's exit interval).
  int64_t exit_at_step = 0;
  double lr = 1e-3;
  double lr_min = 1e-4;
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables
  // Steps with inf/nan gradients are skipped (in every precision); more than
  // this many in a row end the run with an error naming the first bad tensor.
  int64_t max_skipped_steps = 10;

  int64_t val_every = 100;   // 0 disables
  int64_t val_batches = 10;

  // parallel.plan: "manual" runs the batch settings as given; "auto" lets the
  // planner choose the micro-batch (and, once the trainer runs them, the
  // parallel degrees) for parallel.cluster, recording plan.json in the run dir.
  std::string plan = "manual";
  std::string cluster;  // parallel.cluster: a cluster file: a preset name, a path, or `strata calibrate`'s output

  // precision.compute: "f32", or "bf16" / "f16" mixed precision with f32
  // master weights (fp32 and fp16 are read too; a parsed config holds the
  // dtype's name); precision.fp32_ops: op types kept in f32.
  std::string precision = "f32";
  std::vector<std::string> fp32_ops = default_fp32_ops();
  // Dynamic loss scaling (fp16 only): start, multiply by `growth` after
  // `growth_interval` finite steps, by `backoff` on an inf/nan step (skipped).
  double loss_scale = 65536;
  int64_t loss_scale_growth_interval = 2000;
  double loss_scale_growth = 2;
  double loss_scale_backoff = 0.5;
  // train.recompute: "none", "selective" (attention) or "full" (per layer).
  std::string recompute = "none";

  std::string run_dir = "runs/default";
  int64_t checkpoint_every = 200;  // 0: only at the end
  int64_t checkpoint_keep = 2;     // 0: keep all
  bool resume = true;              // continue from run_dir/latest when present

  // Micro-batches of one optimizer step, over all data-parallel ranks.
  int64_t accumulation_steps() const { return global_batch / batch_size; }
  void validate() const;  // throws naming the key
  PrecisionPolicy precision_policy() const;
  SumOrder summation_order() const;  // ops.sum_order

 private:
  void validate_training() const;           // train.*, data.*, checkpoint.*
  void validate_parallel() const;           // parallel.*, against the model's shape (the dimensions' checks)
  void validate_precision_and_ops() const;  // precision.*, train.recompute, ops.*
};

// How the trainer builds its graphs from the config: precision policy,
// recomputation (training graphs only) and fusion.
ModelBuildOptions model_build_options(const TrainConfig& config, bool training);

// `source` names the file in error messages.
TrainConfig parse_train_config(const std::string& toml_text, const std::string& source,
                               const std::vector<std::string>& overrides);
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides);

// The effective configuration as TOML (saved beside the checkpoints).
std::string to_toml(const TrainConfig& config);

}  // namespace strata
