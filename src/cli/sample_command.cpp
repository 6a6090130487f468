#include <filesystem>

#include <fmt/core.h>

#include "backends/backends.h"
#include "ckpt/training_checkpoint.h"
#include "cli/commands.h"
#include "data/tokenizer.h"
#include "model/model_graph.h"
#include "model/sampler.h"

namespace strata::cli {

namespace {

struct SampleArgs {
  std::string checkpoint;
  std::string prompt;
  std::string tokenizer;
  std::string backend = "cpu";
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 1;
};

void sample(const SampleArgs& args) {
  Checkpoint checkpoint(resolve_checkpoint(args.checkpoint));
  TrainingCheckpoint saved = read_training_checkpoint(checkpoint);
  std::string tokenizer_path = args.tokenizer.empty() ? saved.tokenizer : args.tokenizer;
  if (tokenizer_path.empty()) fail("{}: no tokenizer recorded; pass --tokenizer", checkpoint.dir().string());
  Tokenizer tokenizer(tokenizer_path);

  ParameterSet params(model_param_specs(saved.model));
  load_training_parameters(checkpoint, params);
  auto dispatcher = make_dispatcher(args.backend, FallbackPolicy::Warn);
  Sampler sampler(saved.model, params, *dispatcher);
  std::vector<int32_t> prompt = tokenizer.encode(args.prompt);
  if (prompt.empty()) fail("--prompt encodes to no tokens; give some text");
  SamplingOptions options{args.temperature, args.top_k, args.seed};
  std::vector<int32_t> generated = sampler.generate(prompt, args.tokens, options);
  fmt::print("{}{}\n", args.prompt, tokenizer.decode(generated));
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto* command = app.add_subcommand("sample", "Generate text from a checkpoint (KV cache)");
  auto args = std::make_shared<SampleArgs>();
  command->add_option("checkpoint", args->checkpoint, "Checkpoint directory, or a run directory (uses latest)")
      ->required();
  command->add_option("--prompt", args->prompt, "Text to continue")->required();
  command->add_option("--tokens", args->tokens, "Number of tokens to generate")->check(CLI::PositiveNumber);
  command->add_option("--temperature", args->temperature, "0 = greedy")->check(CLI::NonNegativeNumber);
  command->add_option("--top-k", args->top_k, "Sample among the k most likely tokens (0 = all)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--seed", args->seed, "Sampling seed");
  command->add_option("--tokenizer", args->tokenizer, "SentencePiece model (default: the one the run used)");
  command->add_option("--backend", args->backend, "ref or cpu");
  command->callback([args] { sample(*args); });
}

}  // namespace strata::cli
