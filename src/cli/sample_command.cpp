#include <filesystem>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "backends/backends.h"
#include "ckpt/hf_weights.h"
#include "ckpt/training_checkpoint.h"
#include "cli/commands.h"
#include "core/json_file.h"
#include "data/tokenizer.h"
#include "model/family.h"
#include "model/sampler.h"

namespace strata::cli {

namespace {

struct SampleArgs {
  std::string checkpoint;
  std::string prompt;
  std::string tokenizer;
  std::string backend = "cpu";
  std::string device;
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 1;
  bool print_ids = false;
};

// A model to sample: its config, weights and tokenizer file.
struct LoadedModel {
  ModelConfig config;
  ParameterSet params;
  std::string tokenizer;
};

// A HuggingFace model directory (config.json, weights, its own tokenizer).
LoadedModel load_model_directory(const std::filesystem::path& dir) {
  LoadedModel model;
  model.config = model_config_of_hf(read_json_file(dir / "config.json"), (dir / "config.json").string());
  model.params = ParameterSet(model_param_specs(model.config));
  load_hf_weights(dir, model.config, model.params);
  model.tokenizer = dir.string();
  return model;
}

LoadedModel load_checkpoint(const std::string& path) {
  Checkpoint checkpoint(resolve_checkpoint(path));
  TrainingCheckpoint saved = read_training_checkpoint(checkpoint);
  LoadedModel model{saved.model, ParameterSet(model_param_specs(saved.model)), saved.tokenizer};
  load_training_parameters(checkpoint, model.params);
  if (model.tokenizer.empty()) fail("{}: no tokenizer recorded; pass --tokenizer", checkpoint.dir().string());
  return model;
}

void sample(const SampleArgs& args) {
  const bool model_directory = std::filesystem::exists(std::filesystem::path(args.checkpoint) / "config.json");
  LoadedModel model = model_directory ? load_model_directory(args.checkpoint) : load_checkpoint(args.checkpoint);
  Tokenizer tokenizer = load_tokenizer(args.tokenizer.empty() ? model.tokenizer : args.tokenizer);

  auto dispatcher = make_dispatcher(args.backend, FallbackPolicy::Warn, args.device);
  // The weights are read on the host, then live where the backend computes.
  const Device& device = dispatcher->backend().device();
  ParameterSet on_device;
  if (!device.is_host()) {
    on_device = ParameterSet(model.params.specs(), device);
    on_device.copy_from(model.params);
  }
  Sampler sampler(model.config, device.is_host() ? model.params : on_device, *dispatcher);
  std::vector<int32_t> prompt = tokenizer.encode(args.prompt);
  if (prompt.empty()) fail("--prompt encodes to no tokens; give some text");
  SamplingOptions options{args.temperature, args.top_k, args.seed};
  std::vector<int32_t> generated = sampler.generate(prompt, args.tokens, options);
  fmt::print("{}{}\n", args.prompt, tokenizer.decode(generated));
  if (args.print_ids) fmt::print("{}\n", fmt::join(generated, " "));
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto* command =
      app.add_subcommand("sample", "Generate text from a checkpoint or a HuggingFace model directory (KV cache)");
  auto args = std::make_shared<SampleArgs>();
  command->add_option("checkpoint", args->checkpoint,
                      "Checkpoint directory, a run directory (uses latest), or a HuggingFace model directory "
                      "(config.json, weights and its tokenizer)")
      ->required();
  command->add_option("--prompt", args->prompt, "Text to continue")->required();
  command->add_option("--tokens", args->tokens, "Number of tokens to generate")->check(CLI::PositiveNumber);
  command->add_option("--temperature", args->temperature, "0 = greedy")->check(CLI::NonNegativeNumber);
  command->add_option("--top-k", args->top_k, "Sample among the k most likely tokens (0 = all)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--seed", args->seed, "Sampling seed");
  command->add_flag("--ids", args->print_ids, "Also print the generated token ids, on a last line of their own");
  command->add_option("--tokenizer", args->tokenizer,
                      "tokenizer.model, tokenizer.json or a directory holding one (default: the run's, or the model "
                      "directory's)");
  command->add_option("--backend", args->backend, "cpu, ref or opencl");
  command->add_option("--device", args->device, "The backend's device (opencl: an index or a name, as `strata topo` lists them)");
  command->callback([args] { sample(*args); });
}

}  // namespace strata::cli
