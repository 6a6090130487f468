#include <filesystem>

#include <fmt/core.h>

#include "backends/backends.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hf_gpt2.h"
#include "cli/commands.h"
#include "data/tokenizer.h"
#include "model/gpt2.h"
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

GPT2Config model_config(const Checkpoint& checkpoint) {
  const nlohmann::json& model = checkpoint.metadata().at("model");
  GPT2Config config;
  config.n_layer = model.at("n_layer").get<int64_t>();
  config.n_head = model.at("n_head").get<int64_t>();
  config.n_embd = model.at("n_embd").get<int64_t>();
  config.vocab_size = model.at("vocab_size").get<int64_t>();
  config.block_size = model.at("block_size").get<int64_t>();
  config.layer_norm_eps = model.at("layer_norm_eps").get<double>();
  config.validate();
  return config;
}

void sample(const SampleArgs& args) {
  Checkpoint checkpoint(resolve_checkpoint(args.checkpoint));
  GPT2Config config;
  try {
    config = model_config(checkpoint);
  } catch (const nlohmann::json::exception& error) {
    fail("{}: checkpoint metadata lacks the model config: {}", checkpoint.dir().string(), error.what());
  }
  std::string tokenizer_path = args.tokenizer;
  if (tokenizer_path.empty()) tokenizer_path = checkpoint.metadata().value("tokenizer", std::string());
  if (tokenizer_path.empty()) fail("{}: no tokenizer recorded; pass --tokenizer", checkpoint.dir().string());
  Tokenizer tokenizer(tokenizer_path);

  ParameterSet params(gpt2_param_specs(config));
  load_gpt2_weights(checkpoint.dir() / "model.safetensors", params);
  auto dispatcher = make_dispatcher(args.backend, FallbackPolicy::Warn);
  GPT2Sampler sampler(config, params, *dispatcher);
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
