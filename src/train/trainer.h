#pragma once
// The training loop: hardware- and layout-agnostic. It builds the GPT-2 graph
// once, runs its share of each step's micro-batches (parallel/) through the
// compiled graph on the configured backend, accumulates and combines
// gradients, clips, steps AdamW, validates, logs and checkpoints.
#include <memory>
#include <optional>

#include "core/file_lock.h"
#include "data/token_loader.h"
#include "graph/executor.h"
#include "model/gpt2.h"
#include "parallel/data_parallel.h"
#include "parallel/gradient_buckets.h"
#include "parallel/gradient_reduction.h"
#include "parallel/gradient_sync.h"
#include "parallel/tensor_parallel_group.h"
#include "parallel/zero_partition.h"
#include "train/auto_parallel.h"
#include "train/config.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/optimizer.h"

namespace strata {

class Trainer {
 public:
  // `parallel` spreads each step's micro-batches over data-parallel ranks and
  // `tensor` each layer over tensor-parallel ranks; the defaults are one process.
  explicit Trainer(TrainConfig config, DataParallel parallel = {}, TensorParallel tensor = {});

  // Trains from the current step to train.steps, validating and saving on
  // schedule and at the end. Prints the fallback summary. Returns 0, or the
  // signal (SIGINT, SIGTERM) that stopped it early: every rank stops after the
  // same step, and the checkpoint of that step is saved (StopSignals).
  int run();

  StepMetrics step();        // one optimizer step
  double validation_loss();  // mean over train.val_batches micro-batches from the start of val
  void save_checkpoint();
  // Times every kernel of the training graph; run() then prints where the time went.
  void enable_profiling() { train_graph_->enable_profiling(true); profiling_ = true; }

  int64_t completed_steps() const { return completed_steps_; }
  const ParameterSet& params() const { return params_; }
  const Dispatcher& dispatcher() const { return *dispatcher_; }
  size_t arena_bytes() const { return train_graph_->memory_plan().arena_bytes; }

 private:
  void restore(const std::filesystem::path& checkpoint_dir);
  void initialise_parameters();  // whole tensors from the seed, each rank keeping its shards
  // Under tensor parallelism, checkpoints hold whole tensors: assembled from
  // every rank's shards to save, sliced to this rank's shards after loading.
  std::vector<Tensor> whole_tensors(const std::vector<Tensor>& shards);
  void keep_shards(const std::vector<Tensor>& whole, std::vector<Tensor>& shards) const;
  ExactSquareSum gradient_square_sum();  // over the whole model, exactly
  GradientBuckets whole_moments_scratch() const;  // per-parameter tensors in the gradient buckets' layout
  std::string precision_summary() const;  // start-up lines: policy, and what the hardware runs natively
  double run_micro_batch(CompiledGraph& graph, const GPT2Graph& model, TokenLoader& loader,
                         const CompiledGraph::NodeHook& after_node = {});
  void collect_gradient(size_t parameter, Tensor& destination, bool accumulate);
  void print(const std::string& text) const;  // on the reporting rank only
  std::string first_nonfinite_gradient();     // the first parameter (in order) over every rank
  double model_flops_per_token() const;

  TrainConfig config_;
  DataParallel parallel_;
  TensorParallel tensor_;
  std::vector<ParameterShard> shards_;  // of every parameter, in order: this rank's part
  std::optional<DirectoryLock> run_lock_;  // the reporting rank owns checkpoint.dir while it runs
  AutoPlan plan_;                 // the executed layout and its prediction, recorded in plan.json
  std::string plan_summary_;      // its start-up line
  PeakFlops peak_;                // what model FLOPs utilisation is measured against
  LrSchedule schedule_;
  std::unique_ptr<Dispatcher> dispatcher_;
  ParameterSet params_;
  std::vector<Tensor> param_tensors_;  // the parameters' tensors (shared storage), for the ZeRO all-gather
  GradientReduction reduction_;        // how gradients are combined over ranks, and kept
  std::unique_ptr<GradientBuckets> grad_buckets_;
  std::optional<ZeroPartition> zero_;  // parallel.zero = 1 or 2: this rank's share of the optimizer
  std::vector<Tensor> range_grads_;    // the summed gradients of the ranges the optimizer updates
  std::optional<AdamW> optimizer_;
  GPT2Graph train_model_;
  GPT2Graph eval_model_;
  std::unique_ptr<CompiledGraph> train_graph_;
  std::unique_ptr<CompiledGraph> eval_graph_;
  Tensor tokens_, targets_;
  Tensor positions_;
  Tensor loss_seed_;
  std::unique_ptr<GradientSync> grad_sync_;  // collects gradients as backward makes them
  LossScaler scaler_;
  int64_t consecutive_skips_ = 0;  // steps in a row skipped for inf/nan gradients
  int64_t optimizer_updates_ = 0;  // AdamW's step count: steps skipped for overflow do not count
  std::unique_ptr<TokenLoader> train_loader_;
  std::unique_ptr<TokenLoader> val_loader_;
  int64_t completed_steps_ = 0;
  bool profiling_ = false;
};

}  // namespace strata
