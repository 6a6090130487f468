#pragma once
// The training loop: hardware- and layout-agnostic. It builds the model's graph (any family)
// once, runs its share of each step's micro-batches (parallel/) through the
// compiled graph on the configured backend, hands the gradients to their
// reduction (parallel/distributed_gradients.h), unscales, clips, steps AdamW and
// validates. Checkpoints are ckpt/checkpoint_manager.h's, what the run writes
// and prints about itself record/'s.
#include <functional>
#include <memory>
#include <optional>

#include "ckpt/checkpoint_manager.h"
#include "data/token_loader.h"
#include "graph/executor.h"
#include "model/model_graph.h"
#include "parallel/data_parallel.h"
#include "parallel/job_world.h"
#include "parallel/distributed_gradients.h"
#include "parallel/parallelize.h"
#include "parallel/pipeline_parallel.h"
#include "parallel/pipeline_schedule.h"
#include "record/run_recorder.h"
#include "record/trace_session.h"
#include "train/auto_parallel.h"
#include "train/config.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/router_tally.h"

namespace strata {

// The model's graph as the trainer builds it for a rank of `layout` (the default: one process
// running the whole model): precision policy, recomputation, fusion, the LM head's own copy
// of a tied embedding.
// `narrow_gradients`: ModelBuildOptions's, for a trainer whose steps sum no gradients.
ModelGraph build_rank_model(const TrainConfig& config, bool training, const RankLayout& layout = {},
                            bool narrow_gradients = false);

class Trainer {
 public:
  // This rank of `mesh`'s layout (collective over it; its groups registered for the graphs'
  // collective ops, parallel/group_collectives.h), or without one the whole job in one process.
  explicit Trainer(TrainConfig config, DeviceMesh* mesh = nullptr);

  // Trains from the current step to train.steps, validating and saving on
  // schedule and at the end. Prints the fallback summary. Returns 0, or the
  // signal (SIGINT, SIGTERM) that stopped it early: every rank stops after the
  // same step, and the checkpoint of that step is saved (StopSignals).
  int run();

  StepMetrics step();        // one optimizer step
  double validation_loss();  // mean over train.val_batches micro-batches from the start of val
  void save_checkpoint();
  // Times every kernel of the training graph; run() then prints where the time went.
  void enable_profiling() { chunks_.front().train_graph->enable_profiling(true); profiling_ = true; }

  // Records a Chrome trace-event timeline (core/trace.h) of the steps `options` names; run()
  // writes it (rank 0 merging every rank's part) and prints the gap analysis of each traced step.
  void enable_tracing(TraceOptions options);
  // Writes the trace now (run() does it at its end); returns the merged trace on the reporting rank.
  nlohmann::json finish_trace();

  // Called after every node of the first micro-batch this rank runs in the next step, on each
  // model part it runs (`strata compare` reads each node's outputs there, before the memory plan
  // reuses their bytes); cleared when that step ends.
  struct ObservedNode {
    const CompiledGraph& graph;
    const ModelGraph& model;
    int slot = 0;  // of `graph`: where the micro-batch's tensors are
    int part = 0;  // the model part (pipeline parts in model order; 0 for the whole model)
    int node = 0;
  };
  using NodeObserver = std::function<void(const ObservedNode& observed)>;
  void observe_first_micro_batch(NodeObserver observer) { node_observer_ = std::move(observer); }
  // What the backward pass is seeded with this step: loss scale / micro-batches per step.
  double backward_seed() const { return loss_seed_.to_host().item(); }
  // The layout's mesh and where this rank sits in it.
  const MeshShape& mesh() const { return mesh_; }
  const MeshCoordinates& mesh_coordinates() const { return coordinates_; }

  int64_t completed_steps() const { return completed_steps_; }
  const ParameterSet& params() const { return params_; }
  const Dispatcher& dispatcher() const { return *dispatcher_; }
  const Device& device() const { return dispatcher_->backend().device(); }  // where the step's tensors live
  size_t arena_bytes() const { return chunks_.front().train_graph->memory_plan().arena_bytes; }

 private:
  // The constructor's parts, in order.
  void check_job();            // what this job cannot run, before anything is allocated
  void apply_plan();           // threads, the auto or manual plan and its prediction, the MFU peak
  void build_model_chunks();   // this rank's part of the model, per chunk
  void find_held_parameters(); // what this rank holds, and the gradients it collects
  void make_optimizer();       // the gradients' reduction and AdamW over this rank's ranges
  void open_data();            // the training and validation loaders
  void compile_graphs();       // and bind their inputs, weight copies and the reduction's overlap
  void start_or_resume();      // the run directory's checkpoints: resume from the latest, or initialise

  void restore(const std::filesystem::path& checkpoint_dir);
  void initialise_parameters();  // whole tensors from the seed, each rank keeping its shards
  bool holds_every_parameter_whole() const;
  // Whether ranks running different micro-batches exchange activations inside a pass (experts').
  bool ranks_compute_together() const;  // one process's parameters: no dimension splits or cuts the model here
  // After loading whole tensors (model.init_from): this rank's shards of them.
  void keep_held(const std::vector<Tensor>& whole, std::vector<Tensor>& held) const;
  // The per-parameter tensors of this rank's part of the layout for a save or load (ckpt/shard_plan.h).
  RankTensors checkpoint_tensors(std::vector<Tensor> parameters, GradientBuckets& first_moments,
                                 GradientBuckets& second_moments);
  // Host copies of tensors on the device (the tensors themselves on the host), for a checkpoint to write.
  static std::vector<Tensor> host_copies(const std::vector<Tensor>& tensors);
  nlohmann::json layout_json() const;
  // Held by several coordinates of a dimension, apart (the tied embedding on a pipeline's first and last stage).
  bool held_apart(size_t parameter) const;
  DimensionOptions dimension_options() const;  // the configured choices the dimensions read
  bool sums_no_gradients() const;
  ExactSquareSum gradient_square_sum();  // over the whole model, exactly
  // The pipeline's part of the step (pipeline_step.cpp).
  bool pipelined() const { return pipeline_.degree() > 1; }
  void check_pipeline_schedule() const;          // the schedule fits this job's micro-batches per rank
  int chunks_per_stage() const;                  // the model parts this rank runs (interleaved: several)
  std::vector<int> pipeline_layer_split() const;  // every model part's layers
  void sum_tied_gradients();             // the first and last stage's copies of the tied embedding
  // The last stage's `values` (the losses' stage) on every stage; without a pipeline, `values`.
  std::vector<double> from_loss_stage(std::vector<double> values);
  // One step's share of micro-batches through this rank's pipeline stage, by
  // the schedule's actions; the last stage's losses, in order, on every stage.
  std::vector<double> pipeline_micro_batches(int64_t count);
  std::vector<double> pipeline_validation(int64_t count);
  // Runs one of the schedule's actions in `slot`; true when the micro-batch's slot is free again.
  bool run_pipeline_action(const PipelineAction& action, int slot, int64_t count, std::vector<double>& losses);
  // A step's share of micro-batches through the whole model (no pipeline), gradients collected as made.
  std::vector<double> micro_batches(const MicroBatchShare& share);
  // Unscales, finds the norm, and updates (or skips the step on inf/nan gradients).
  void update(StepMetrics& metrics, double loss_scale);
  std::string startup_banner() const;     // the start-up lines: model, layout, backend, precision, plan
  std::string precision_summary() const;  // start-up lines: policy, and what the hardware runs natively
  void upload_batch();  // the loader's batch to the device's copies the graphs read
  double run_micro_batch(CompiledGraph& graph, const ModelGraph& model, TokenLoader& loader,
                         const CompiledGraph::NodeHook& after_node = {});
  void bind_inputs();
  void bind_pipeline_inputs();  // every micro-batch's data of a step, and the stage boundary's placeholders
  // Each value of `model` standing for a held parameter (its own, and the LM head's copy of the tied
  // embedding), with the parameter's held index.
  std::vector<std::pair<int, size_t>> held_parameter_values(const ModelGraph& model) const;
  void collect_gradient(size_t entry, Tensor& destination, bool accumulate);
  // Binds the one chunk's kept gradients to their places in the buckets, so the graph writes them there
  // (a step's first micro-batch; no copy), or back to the graph's arena (later micro-batches add).
  void place_gradients(bool in_buckets);
  // Low precision, unless the optimizer is sharded (ZeRO over several ranks) or a stage runs several model
  // chunks (interleaved): each parameter the graphs cast to the compute dtype gets a copy in it beside it,
  // which AdamW writes as it updates the parameter.
  void keep_weight_copies();
  // The copies stand in for the graphs' casts of the parameters (which are then skipped), or not. Only
  // copies refreshed by the last update in this process are supplied (not after a resume or a new start).
  void supply_weight_copies(bool supply);
  void print(const std::string& text) const;  // on the reporting rank only
  std::string first_nonfinite_gradient();     // the first parameter (in order) over every rank
  // The training graph's kernel time per op type (--profile), for the run's record.
  std::optional<KernelProfile> kernel_profile() const;

  // First, so that it outlives every communication handle the members below may still hold.
  std::unique_ptr<TraceSession> trace_;

  JobWorld world_;  // with parallel_, before config_: the config is checked against the host's memory with them
  DataParallel parallel_;
  TrainConfig config_;
  // The one dimension the step itself is shaped by: its schedule orders the micro-batches stage by
  // stage (pipeline_step.cpp). Every other dimension reaches the trainer only through the mesh:
  // its pass (rank_layout), its placements and its start-up line.
  PipelineParallel pipeline_;
  MeshShape mesh_;  // the degrees of the groups this rank was given
  DeviceMesh* device_mesh_ = nullptr;  // their groups (none: one process)
  MeshCoordinates coordinates_;
  std::vector<ParamSpec> specs_;        // the whole model's parameters, in order
  std::vector<HeldPiece> pieces_;       // of every parameter, in order: this rank's part
  std::vector<size_t> held_;            // the parameters this rank's pipeline stage holds (indices into specs_)
  std::vector<int> layers_per_stage_;   // the pipeline's split of the layers
  MeshPlacements placements_;              // every parameter's, along every dimension
  std::vector<ShardPiece> checkpoint_pieces_;  // every rank's, under this layout
  int plan_threads_ = 0;          // threads per rank the plan was made for (0: as the profile was measured)
  AutoPlan plan_;                 // the executed layout and its prediction, recorded in plan.json
  std::string plan_summary_;      // its start-up line
  PeakFlops peak_;                // what model FLOPs utilisation is measured against
  LrSchedule schedule_;
  std::unique_ptr<Dispatcher> dispatcher_;
  ParameterSet params_;
  std::vector<Tensor> param_tensors_;  // the parameters' tensors (shared storage), for the ZeRO all-gather
  std::unique_ptr<DistributedGradients> gradients_;  // collected, reduced over ranks, split into the optimizer's ranges
  std::optional<AdamW> optimizer_;
  // The model parts this rank runs: the whole model, a pipeline stage's part, or (interleaved) its
  // parallel.virtual_stages chunks, chunk c being model part c·pp + stage.
  struct ModelChunk {
    ModelGraph train_model;
    ModelGraph eval_model;
    std::unique_ptr<CompiledGraph> train_graph;
    std::unique_ptr<CompiledGraph> eval_graph;
    int node_offset = 0;  // its nodes' first number in GradientSync's numbering of every chunk's nodes
    // Per slot (a micro-batch in flight): its data (the backward reads them too).
    std::vector<Tensor> slot_tokens, slot_targets;
  };
  std::vector<ModelChunk> chunks_;
  RouterTally router_tally_;  // a mixture-of-experts model's router figures over the step
  // A gradient the step collects: a held parameter's (entry k is held parameter k), or the LM
  // head's copy of the tied embedding when the embedding's is held too (the last entry).
  struct GradientEntry {
    size_t param = 0;  // held index
    int chunk = 0;     // whose backward makes it
    int value = -1;    // the param value in that chunk's graph
  };
  std::vector<GradientEntry> entries_;
  std::string tokenizer_file_;          // the corpus's tokenizer, recorded in checkpoints ("": shards given directly)
  std::optional<size_t> tied_index_;     // the tied embedding's index in specs_ (tied models)
  std::optional<size_t> head_copy_entry_;
  Tensor tokens_, targets_;  // the loader's, on the host
  Tensor device_tokens_, device_targets_;  // what the graphs read: on the backend's device (tokens_ on the host)
  Tensor positions_;
  Tensor loss_seed_;
  // Pipeline stages: every micro-batch's data of a step; the chunk and slot whose gradients the hook collects.
  std::vector<Tensor> step_tokens_, step_targets_;
  std::vector<PipelineAction> stage_actions_;  // this stage's share of every step, by the schedule
  int active_chunk_ = 0;
  int active_slot_ = 0;
  double pipeline_wait_s_ = 0;  // of the last step: waiting for other stages
  bool gradients_in_buckets_ = false;        // place_gradients' state
  struct WeightCopyUse {
    CompiledGraph* graph;
    int value;    // the cast's output in that graph
    size_t held;  // whose copy stands for it
  };
  std::vector<Tensor> weight_copies_;  // per held parameter, in the compute dtype; undefined where none
  std::vector<WeightCopyUse> weight_copy_uses_;
  bool weight_copies_fresh_ = false;     // the copies hold the parameters as they are
  bool weight_copies_supplied_ = false;  // supply_weight_copies' state
  LossScaler scaler_;
  int64_t consecutive_skips_ = 0;  // steps in a row skipped for inf/nan gradients
  int64_t optimizer_updates_ = 0;  // AdamW's step count: steps skipped for overflow do not count
  std::unique_ptr<TokenLoader> train_loader_;
  std::unique_ptr<TokenLoader> val_loader_;
  std::optional<CheckpointManager> checkpoints_;  // the run directory's, locked while the run writes there
  int64_t completed_steps_ = 0;
  bool profiling_ = false;
  NodeObserver node_observer_;
};

}  // namespace strata
