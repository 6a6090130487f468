// The start-up lines a run prints before its first step: the model, each parallel dimension's
// share of the work, the backend, the precision and what the hardware runs natively, the plan.
#include <omp.h>

#include <map>
#include <set>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "model/family.h"
#include "train/trainer.h"

namespace strata {

std::string Trainer::startup_banner() const {
  std::string text =
      fmt::format("model: {} {} layers, {} heads, width {}, vocab {}, context {} ({:.2f}M parameters)\n",
                  config_.model.family, config_.model.n_layer, config_.model.n_head, config_.model.n_embd,
                  config_.model.vocab_size, config_.model.block_size,
                  static_cast<double>(config_.model.num_parameters()) / 1e6);
  const DimensionOptions options = dimension_options();
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    const int degree = mesh_.degree(dimension.name);
    if (degree == 1 || !dimension.summarize) continue;
    text += dimension.summarize({.model = config_.model,
                                 .degree = degree,
                                 .options = options,
                                 .micro_batches_per_rank = config_.accumulation_steps() / parallel_.degree(),
                                 .parameters_per_rank = static_cast<double>(params_.count()),
                                 .planned_layers_per_part = plan_.chosen.layers_per_stage});
  }
  // The ranks sharing a step's micro-batches, and their gradients' reduction.
  if (parallel_.degree() > 1) {
    text += fmt::format("data parallel: {} ranks, micro-batches of {} rows, {} per rank per step; {} bucket(s) of up "
                        "to {:g} MiB, {}; ZeRO-{}: gradient buffers {:.2f} MiB, optimizer state {:.2f} MiB per rank\n",
                        parallel_.degree(), config_.batch_size, config_.accumulation_steps() / parallel_.degree(),
                        gradients_->buckets(), config_.bucket_mb, gradients_->describe(), config_.zero,
                        static_cast<double>(gradients_->buffer_bytes()) / (1 << 20),
                        static_cast<double>(optimizer_->state_bytes()) / (1 << 20));
  }
  text += fmt::format("backend: {} ({} threads{}{}); arena {:.1f} MiB (unshared {:.1f} MiB)\n", config_.backend,
                      omp_get_max_threads(), parallel_.degree() > 1 ? " per rank" : "",
                      config_.summation_order() == SumOrder::Natural ? "" : ", GEMM sums permuted by ops.sum_order, a diagnostic",
                      static_cast<double>(arena_bytes()) / (1 << 20),
                      static_cast<double>(chunks_.front().train_graph->memory_plan().unshared_bytes) / (1 << 20));
  text += precision_summary();
  text += plan_summary_;
  text += peak_.flops > 0 ? fmt::format("model FLOPs utilisation (MFU) against the {}: {:.3g} TFLOP/s\n",
                                        peak_.source, peak_.flops / 1e12)
                          : "no MFU: set parallel.cluster to a cluster file (a preset, or the one `strata calibrate` "
                            "writes) to report model FLOPs utilisation\n";
  return text;
}

std::string Trainer::precision_summary() const {
  PrecisionPolicy policy = config_.precision_policy();
  std::string text = fmt::format("precision: {}", config_.precision);
  if (policy.low != DType::F32) {
    std::string kept;
    for (const std::string& op : policy.fp32_ops) kept += (kept.empty() ? "" : ", ") + op;
    text += fmt::format(" (f32 master weights and AdamW state; ops kept in f32: {}{})", kept.empty() ? "none" : kept,
                        scaler_.dynamic() ? fmt::format("; dynamic loss scale from {:g}", scaler_.scale()) : "");
  }
  text += fmt::format("; recompute: {}; fusion: {}\n", config_.recompute, config_.fuse ? "on" : "off");
  // Which op types of the training graph the backend cannot run natively in the dtype they got.
  std::map<Route, std::set<std::string>> not_native;
  // On a device, what the ref fallbacks will copy between it and the host per step.
  int64_t transfers = 0;
  double transfer_bytes = 0;
  const CompiledGraph& graph = *chunks_.front().train_graph;
  for (size_t node = 0; node < graph.kernel_choices().size(); ++node) {
    const KernelChoice& choice = graph.kernel_choices()[node];
    if (choice.route != Route::Native) {
      not_native[choice.route].insert(fmt::format("{} ({})", choice.schema->name, dtype_name(choice.dtype)));
    }
    if (choice.route != Route::Reference) continue;
    const Node& op = graph.graph().node(static_cast<int>(node));
    Metas inputs, outputs;
    for (int value : op.inputs) inputs.push_back(graph.graph().value(value).meta);
    for (int value : op.outputs) outputs.push_back(graph.graph().value(value).meta);
    const TransferTotals copies = copies_of_route(choice.route, device(), inputs, outputs);
    transfers += config_.accumulation_steps() * copies.count;
    transfer_bytes += static_cast<double>(config_.accumulation_steps()) * static_cast<double>(copies.bytes);
  }
  for (const auto& [route, ops] : not_native) {
    std::string list;
    for (const std::string& op : ops) list += (list.empty() ? "" : ", ") + op;
    text += route == Route::Emulated
                ? fmt::format("backend '{}' has no native arithmetic for {}: they run in f32 and are rounded back\n",
                              config_.backend, list)
                : fmt::format("backend '{}' has no kernel for {}: they run {}\n", config_.backend, list,
                              route_name(route));
  }
  if (transfers > 0) {
    text += fmt::format("the ref fallbacks copy {} tensors ({:.3f} MB) per step between the host and {}\n",
                        transfers / parallel_.degree(), transfer_bytes / parallel_.degree() / 1e6, device().name());
  }
  return text;
}

}  // namespace strata
