// Produces everything the PyTorch golden comparison (check_golden.py) needs,
// for one backend: a tiny corpus, a tiny model's initial weights (GPT-2 or a LLaMA), the first
// micro-batch's logits, loss and parameter gradients, and the result of three
// optimizer steps of the real Trainer (gradient accumulation and active
// clipping), as losses per step plus a checkpoint.
//
// With PRECISION bf16 or fp16 (check_mixed_precision.py), the model is built
// and trained as the Trainer does in that mixed precision (autocast, default
// fusion, dynamic loss scaling for fp16) for kMixedPrecisionSteps steps; the
// first micro-batch's gradients are unscaled before they are written.
//
// Usage: golden_dump BACKEND OUT_DIR [fp32|bf16|fp16 [gpt2|llama|llama-tied|llama3|mixtral|qwen3_moe|qwen2_moe|olmoe]]
#include <cstdint>
#include <exception>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "ckpt/checkpoint.h"
#include "ckpt/hf_weights.h"
#include "ckpt/safetensors.h"
#include "core/file_io.h"
#include "data/corpus.h"
#include "data/token_loader.h"
#include "graph/executor.h"
#include "model/model_graph.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kTokenizerVocab = 320;
constexpr int64_t kModelVocab = 331;  // padded above the tokenizer's: unused rows get zero gradient
constexpr uint64_t kInitSeed = 20240520;
constexpr int64_t kSteps = 3;
constexpr int64_t kMixedPrecisionSteps = 20;  // the loss curve compared against PyTorch fp32

// Deterministic English-like text (a fixed word list walked by an LCG), large
// enough for a 320-piece BPE tokenizer and the mixed-precision run's 40
// micro-batches (about 29k training tokens) without wrapping.
std::string generated_text() {
  static const char* const kWords[] = {
      "the",    "lord",   "said",   "unto",   "them",  "and",    "behold", "a",     "great",  "light",
      "shone",  "upon",   "waters", "of",     "deep",  "river",  "mountain", "king", "people", "went",
      "forth",  "into",   "land",   "their",  "fathers", "city", "gate",   "house", "bread",  "wine",
      "morning", "evening", "stone", "field",  "shepherd", "flock", "harvest", "seed", "voice",  "heard",
      "spake",  "came",   "which",  "were",   "all",   "is",     "good",   "over",  "under",  "every"};
  constexpr uint64_t kWordCount = sizeof(kWords) / sizeof(kWords[0]);
  uint64_t state = 0x2545F4914F6CDD1DULL;
  auto next = [&state](uint64_t bound) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % bound;
  };
  std::string text;
  for (int line = 0; line < 600; ++line) {
    uint64_t words = 6 + next(10);
    for (uint64_t w = 0; w < words; ++w) {
      std::string word = kWords[next(kWordCount)];
      if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      text += word;
      text += w + 1 == words ? (next(3) == 0 ? "." : ";") : (next(7) == 0 ? ", " : " ");
    }
    text += "\n";
  }
  return text;
}

// The models the golden tests check: GPT-2, and LLaMA with grouped-query attention (2 kv heads for 4
// query heads) untied, tied, and with llama3 rope scaling (whose original length of 16 positions puts
// the 32 trained ones past it, so every band of the scaling is used), a head size that is not
// n_embd / n_head, and biases on the attention and the MLP.
// The mixture-of-experts models: Mixtral-shaped (8 experts, top-2, always renormalised),
// Qwen3-MoE-shaped (per-head q/k norms, 6 experts, top-3 without renormalising), Qwen2-MoE-shaped (q/k/v
// biases, a shared expert behind its sigmoid gate, 4 experts, top-2 renormalised) and OLMoE-shaped (q/k
// norms over their whole width, 8 experts, top-2), all with the load-balancing loss (coefficient 0.02,
// larger than transformers' default 0.001 so its share of the loss and the router's gradients is well
// above the tolerance) and a router z-loss.
ModelConfig golden_moe_model(ModelConfig config, const std::string& model) {
  config.family = model;
  config.n_kv_head = 2;
  config.rope_theta = 10000;
  config.tie_word_embeddings = false;
  config.moe_intermediate_size = 48;
  config.router_aux_loss_coef = 0.02;
  config.router_z_loss_coef = 0.001;
  config.num_experts = model == "qwen3_moe" ? 6 : model == "qwen2_moe" ? 4 : 8;
  config.num_experts_per_tok = model == "qwen3_moe" ? 3 : 2;
  if (model == "qwen3_moe") config.head_dim = 8;
  if (model == "qwen2_moe") {
    config.attention_bias = true;
    config.norm_topk_prob = true;
    config.shared_expert_intermediate_size = 40;
  }
  return config;
}

// The models the golden tests check: GPT-2, and LLaMA with grouped-query attention (2 kv heads for 4
// query heads) untied, tied, and with llama3 rope scaling (whose original length of 16 positions puts
// the 32 trained ones past it, so every band of the scaling is used), a head size that is not
// n_embd / n_head, and biases on the attention and the MLP; and the MoE models above.
ModelConfig golden_model(const std::string& model) {
  ModelConfig config;
  config.n_layer = 2;
  config.n_head = 4;
  config.n_embd = 64;
  config.vocab_size = kModelVocab;
  config.block_size = 32;
  if (model == "gpt2") return config;
  if (model == "mixtral" || model == "qwen3_moe" || model == "qwen2_moe" || model == "olmoe") {
    return golden_moe_model(config, model);
  }
  config.family = "llama";
  config.n_kv_head = 2;
  config.intermediate_size = 96;
  config.rope_theta = 10000;
  config.tie_word_embeddings = model == "llama-tied";
  if (model == "llama3") {
    config.head_dim = 8;
    config.rope_scaling = {.type = "llama3", .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                           .original_max_positions = 16};
    config.attention_bias = true;
    config.mlp_bias = true;
  } else if (model != "llama" && model != "llama-tied") {
    fail("unknown golden model '{}' (gpt2, llama, llama-tied, llama3, mixtral, qwen3_moe, qwen2_moe, olmoe)", model);
  }
  return config;
}

TrainConfig golden_config(const std::string& backend, const std::string& precision, const std::string& model,
                          const fs::path& out) {
  TrainConfig config;
  config.precision = precision;
  config.model = golden_model(model);
  config.init_from = (out / "init.safetensors").string();
  config.data_dir = (out / "corpus").string();
  config.backend = backend;
  config.fallback = "allow";  // the summary is printed; the comparison judges the numbers
  config.seed = 1;
  config.batch_size = 2;
  config.global_batch = 4;  // two micro-batches per step
  config.steps = precision == "fp32" ? kSteps : kMixedPrecisionSteps;
  config.lr = 3e-3;
  config.lr_min = 3e-4;
  config.warmup_steps = 1;  // lr, then cosine: lr, lr_min
  // Large enough that a wrong decay rule shows well beyond the tolerance.
  config.weight_decay = 0.3;
  // With eps 1e-8, an element whose gradient is below ~1e-7 moves by about
  // lr * gradient / eps, which magnifies fp32 rounding of the gradient past
  // the tolerance (PyTorch fp32 against PyTorch fp64 fails there too).
  config.adam_eps = 1e-5;
  config.grad_clip = 0.5;  // below the gradient norms of these steps, so clipping acts
  config.val_every = 0;
  config.run_dir = (out / "run").string();
  config.checkpoint_every = 0;
  config.resume = false;
  config.validate();
  return config;
}

// The fp32 golden test checks the plain graph; mixed precision checks the
// graph the Trainer trains with (autocast and its default fusion).
ModelBuildOptions first_micro_batch_options(const TrainConfig& config) {
  if (config.precision == "fp32") return {};
  return model_build_options(config, /*training=*/true);
}

// fp16 gradients are computed at the Trainer's initial loss scale, so small
// ones do not flush to zero in half precision.
double first_micro_batch_loss_scale(const TrainConfig& config) {
  return config.precision == "fp16" ? config.loss_scale : 1.0;
}

// One forward and backward pass of the first training micro-batch: logits,
// loss and d(loss)/d(param) of the mean cross-entropy, as PyTorch's
// loss.backward() gives them (the loss gradient is seeded with the loss
// scale, and the gradients divided by it).
void dump_first_micro_batch(const TrainConfig& config, const ParameterSet& params, const fs::path& path) {
  auto dispatcher = make_dispatcher(config.backend, parse_fallback_policy(config.fallback));
  const int64_t batch = config.batch_size;
  const int64_t seq = config.model.block_size;
  ModelGraph model = build_model_graph(config.model, batch, seq, /*training=*/true, first_micro_batch_options(config));
  std::set<int> kept{model.loss, model.logits};
  for (const auto& [param, grad] : model.grads.of) kept.insert(grad);
  CompiledGraph graph(model.graph, *dispatcher, kept);
  const Device& device = dispatcher->backend().device();  // inputs go there, results come back

  Tensor tokens = Tensor::empty({batch, seq}, DType::I32);
  Tensor targets = Tensor::empty({batch, seq}, DType::I32);
  TokenLoader(read_corpus_meta(config.data_dir).train_shards, batch, seq, config.model.vocab_size).next(tokens, targets);
  Tensor positions = position_ids(seq);
  Tensor seed = Tensor::empty({}, DType::F32);
  const double loss_scale = first_micro_batch_loss_scale(config);
  seed.data<float>()[0] = static_cast<float>(loss_scale);
  for (size_t i = 0; i < params.size(); ++i) graph.bind(model.params[i], params.tensor(i).to_device(device));
  graph.bind(model.tokens, tokens.to_device(device));
  graph.bind(model.targets, targets.to_device(device));
  graph.bind(model.positions, positions.to_device(device));
  graph.bind(model.grads.seed, seed.to_device(device));
  graph.run();

  TensorMap dump{{"tokens", tokens},
                 {"targets", targets},
                 {"logits", graph.tensor(model.logits).host_copy()},
                 {"loss", graph.tensor(model.loss).host_copy()}};
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor grad = graph.tensor(model.grads.of.at(model.params[i]));  // kept: nothing reads it after the run
    if (loss_scale != 1.0) dispatcher->run("scale", {grad}, {grad}, {{"factor", 1.0 / loss_scale}});
    dump["grad." + params.spec(i).name] = grad.host_copy();
  }
  write_safetensors(path, dump);
  std::string fallbacks = dispatcher->summary();
  if (!fallbacks.empty()) fmt::print("first micro-batch on '{}':\n{}", config.backend, fallbacks);
}

// The model's keys (model_config_json) and the training settings the reference needs.
json config_json(const TrainConfig& config) {
  json settings = model_config_json(config.model);
  settings.update(json{{"precision", config.precision},
                       {"loss_scale", config.loss_scale},
                       {"batch_size", config.batch_size},
                       {"accumulation_steps", config.accumulation_steps()},
                       {"steps", config.steps},
                       {"lr", config.lr},
                       {"lr_min", config.lr_min},
                       {"warmup_steps", config.warmup_steps},
                       {"weight_decay", config.weight_decay},
                       {"beta1", config.beta1},
                       {"beta2", config.beta2},
                       {"adam_eps", config.adam_eps},
                       {"grad_clip", config.grad_clip}});
  return settings;
}

void run(const std::string& backend, const std::string& precision, const std::string& model, const fs::path& out) {
  fs::create_directories(out);
  fs::remove_all(out / "run");  // a checkpoint of an earlier run would collide with this one's
  write_file_atomic(out / "corpus.txt", generated_text());
  CorpusMeta corpus = prepare_corpus({out / "corpus.txt"}, out / "corpus", kTokenizerVocab);

  TrainConfig config = golden_config(backend, precision, model, out);
  ParameterSet initial(model_param_specs(config.model));
  initial.initialise(CounterRng(kInitSeed));
  save_hf_weights(config.init_from, initial);
  dump_first_micro_batch(config, initial, out / "first_micro_batch.safetensors");

  Trainer trainer(config);
  json steps = json::array();
  for (int64_t s = 0; s < config.steps; ++s) {
    StepMetrics metrics = trainer.step();
    steps.push_back({{"step", metrics.step},
                     {"loss", metrics.loss},
                     {"lr", metrics.lr},
                     {"grad_norm", metrics.grad_norm},
                     {"loss_scale", metrics.loss_scale.value_or(1.0)},
                     {"skipped", metrics.skipped}});
  }
  trainer.save_checkpoint();
  std::string fallbacks = trainer.dispatcher().summary();
  if (!fallbacks.empty()) fmt::print("training on '{}':\n{}", backend, fallbacks);

  json report{{"backend", backend},
              {"config", config_json(config)},
              {"train_shards", json::array()},
              {"initial_weights", config.init_from},
              {"first_micro_batch", (out / "first_micro_batch.safetensors").string()},
              {"checkpoint", resolve_checkpoint(config.run_dir).string()},
              {"steps", steps}};
  for (const fs::path& shard : corpus.train_shards) report["train_shards"].push_back(shard.string());
  write_file_atomic(out / "golden.json", report.dump(2) + "\n");
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    fmt::print(stderr,
               "usage: golden_dump BACKEND OUT_DIR [fp32|bf16|fp16 "
               "[gpt2|llama|llama-tied|llama3|mixtral|qwen3_moe|qwen2_moe|olmoe]]\n");
    return 2;
  }
  try {
    strata::run(argv[1], argc >= 4 ? argv[3] : "fp32", argc == 5 ? argv[4] : "gpt2", argv[2]);
  } catch (const std::exception& error) {
    fmt::print(stderr, "golden_dump: {}\n", error.what());
    return 1;
  }
  return 0;
}
