// `strata ckpt inspect DIR`: what a checkpoint holds (step, model, the layout it
// was saved under, files, every global tensor and its pieces);
// `strata ckpt convert DIR OUT --layout dp=..,tp=..,pp=..,vs=..` (every registered dimension): offline
// resharding (ckpt/convert.h); `strata export DIR --hf OUT`: a HuggingFace
// model directory (ckpt/hf_export.h).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include "ckpt/convert.h"
#include "ckpt/hf_export.h"
#include "ckpt/training_checkpoint.h"
#include "cli/commands.h"
#include "parallel/parallel_dimension.h"

namespace strata::cli {

namespace {

namespace fs = std::filesystem;

std::string bytes_text(double bytes) {
  if (bytes >= 1 << 30) return fmt::format("{:.2f} GiB", bytes / (1 << 30));
  if (bytes >= 1 << 20) return fmt::format("{:.2f} MiB", bytes / (1 << 20));
  return fmt::format("{:.1f} KiB", bytes / 1024);
}

void inspect(const std::string& path) {
  const Checkpoint checkpoint(resolve_checkpoint(path));
  const TrainingCheckpoint state = read_training_checkpoint(checkpoint);
  fmt::print("checkpoint {}: step {}\n", checkpoint.dir().string(), state.step);
  fmt::print("model: {}, {} layers, {} heads, width {}, vocabulary {}, context {} ({:.2f}M parameters)\n",
             state.model.family, state.model.n_layer, state.model.n_head, state.model.n_embd, state.model.vocab_size,
             state.model.block_size, static_cast<double>(state.model.num_parameters()) / 1e6);
  fmt::print("saved under: {}\n", state.layout.is_null() ? "one process (no layout recorded)" : state.layout.dump());
  fmt::print("data position: shard {}, offset {}; optimizer updates {}{}\n", state.train_loader.shard,
             state.train_loader.offset, state.optimizer_updates,
             state.loss_scale ? fmt::format("; loss scale {:g}", state.loss_scale->scale) : "");
  double file_bytes = 0;
  for (const std::string& file : checkpoint.files()) file_bytes += static_cast<double>(fs::file_size(checkpoint.dir() / file));
  fmt::print("files: {} ({})\n", checkpoint.files().size(), bytes_text(file_bytes));
  fmt::print("{:<44} {:>16} {:>5} {:>7} {:>11}\n", "tensor", "shape", "dtype", "pieces", "bytes");
  double tensor_bytes = 0;
  for (const auto& [name, stored] : checkpoint.tensors()) {
    const double bytes = static_cast<double>(shape_numel(stored.shape) * static_cast<int64_t>(dtype_size(stored.dtype)));
    tensor_bytes += bytes;
    fmt::print("{:<44} {:>16} {:>5} {:>7} {:>11}\n", name, shape_str(stored.shape), safetensors_dtype_name(stored.dtype),
               stored.pieces.size(), bytes_text(bytes));
  }
  fmt::print("{} tensors, {} of data\n", checkpoint.tensors().size(), bytes_text(tensor_bytes));
}

}  // namespace

void add_ckpt_command(CLI::App& app) {
  auto* ckpt = app.add_subcommand("ckpt", "Inspect or reshard training checkpoints");
  ckpt->require_subcommand(1);

  auto* inspect_command = ckpt->add_subcommand("inspect", "Step, model, saved layout, files and every tensor");
  auto path = std::make_shared<std::string>();
  inspect_command->add_option("checkpoint", *path, "Checkpoint directory, or a run directory (its newest)")->required();
  inspect_command->callback([path] { inspect(*path); });

  auto* convert = ckpt->add_subcommand("convert", "Rewrite a checkpoint as another layout saves it (no training)");
  auto source = std::make_shared<std::string>(), out = std::make_shared<std::string>(),
       layout = std::make_shared<std::string>();
  convert->add_option("checkpoint", *source, "Checkpoint directory, or a run directory (its newest)")->required();
  convert->add_option("out", *out, "New run directory to write it into")->required();
  std::string keys;
  for (const ParallelDimension& dimension : parallel_dimensions()) keys += dimension.name + "=N,";
  convert->add_option("--layout", *layout, "Target layout: " + keys + "vs=N (every parallel dimension's degree and the "
                                           "virtual stages; absent keys are 1)")
      ->required();
  convert->callback([source, out, layout] {
    const Checkpoint checkpoint(resolve_checkpoint(*source));
    const fs::path written = convert_training_checkpoint(checkpoint, *out, parse_checkpoint_layout(*layout));
    fmt::print("wrote {} ({} files) as layout {}\n", written.string(), Checkpoint(written).files().size(), *layout);
  });
}

void add_export_command(CLI::App& app) {
  auto* command = app.add_subcommand("export", "Write a checkpoint's model in a format other tools load");
  auto source = std::make_shared<std::string>(), hf = std::make_shared<std::string>();
  auto max_shard_mb = std::make_shared<double>(static_cast<double>(kDefaultHfShardBytes) / 1e6);
  command->add_option("checkpoint", *source, "Checkpoint directory, or a run directory (its newest)")->required();
  command->add_option("--hf", *hf, "HuggingFace model directory to create (the family's from_pretrained: GPT2LMHeadModel, LlamaForCausalLM)")
      ->required();
  command->add_option("--max-shard-mb", *max_shard_mb, "Largest weights file before sharding, in MB (default 5000)")
      ->check(CLI::PositiveNumber);
  command->callback([source, hf, max_shard_mb] {
    const Checkpoint checkpoint(resolve_checkpoint(*source));
    export_hf(checkpoint, *hf, static_cast<size_t>(*max_shard_mb * 1e6));
    fmt::print("exported {} to {}\n", checkpoint.dir().string(), *hf);
  });
}

}  // namespace strata::cli
