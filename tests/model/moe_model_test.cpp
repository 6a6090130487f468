// The mixture-of-experts families (Mixtral, Qwen3-MoE, Qwen2-MoE, OLMoE): Mixtral's published parameter
// counts (total and active), their HuggingFace names with the experts stacked, the config checks,
// config.json both ways (and the layouts Strata refuses), the router losses added to the training loss, and the KV-cache sampler
// through the MoE block against the full forward graph.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "graph/executor.h"
#include "model/family.h"
#include "model/model_graph.h"
#include "model/sampler.h"
#include "support/error_text.h"
#include "support/full_forward.h"
#include "support/llama_shapes.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::moe_config;

ModelConfig small_qwen2_moe() {
  ModelConfig c = moe_config("qwen2_moe", 2, 4, 2, 32, 24, 37, 4, 2);
  c.attention_bias = true;
  c.shared_expert_intermediate_size = 20;
  return c;
}

ModelConfig small_qwen3_moe() {
  ModelConfig c = moe_config("qwen3_moe", 2, 4, 2, 32, 24, 37, 5, 2);
  c.head_dim = 12;
  c.norm_topk_prob = true;
  c.router_aux_loss_coef = 0.05;
  c.router_z_loss_coef = 0.01;
  return c;
}

// Every family, small.
std::vector<ModelConfig> small_moe_models() {
  return {moe_config("mixtral", 2, 4, 2, 32, 24, 37, 5, 2), small_qwen3_moe(), small_qwen2_moe(),
          moe_config("olmoe", 2, 4, 2, 32, 24, 37, 6, 2)};
}

TEST(Moe, MixtralParameterCountsAreThePublishedOnes) {
  // Mixtral-8x7B (config.json: 32 layers, 32 heads, 8 kv heads, 4096 wide, experts 14336 wide, 32000 tokens).
  const ModelConfig mixtral = moe_config("mixtral", 32, 32, 8, 4096, 14336, 32000, 8, 2);
  EXPECT_EQ(mixtral.num_parameters(), 46702792704);
  // MFU counts the active parameters: 12.9B (two of the eight experts per token).
  const double attention = 12.0 * 32 * 32 * 128 * 16;
  EXPECT_DOUBLE_EQ(model_family(mixtral).training_flops_per_token(mixtral), 6.0 * 12879925248 + attention);
}

TEST(Moe, HuggingFaceNamesWithTheExpertsStacked) {
  std::map<std::string, ParamSpec> specs;
  for (const ParamSpec& spec : model_param_specs(moe_config("mixtral", 2, 4, 2, 32, 24, 37, 5, 2))) {
    specs[spec.name] = spec;
  }
  EXPECT_EQ(specs.at("model.layers.1.block_sparse_moe.gate.weight").shape, (Shape{5, 32}));
  EXPECT_EQ(specs.at("model.layers.1.block_sparse_moe.experts.w1.weight").shape, (Shape{5, 24, 32}));
  EXPECT_EQ(specs.at("model.layers.1.block_sparse_moe.experts.w3.weight").shape, (Shape{5, 24, 32}));
  EXPECT_EQ(specs.at("model.layers.1.block_sparse_moe.experts.w2.weight").shape, (Shape{5, 32, 24}));
  EXPECT_EQ(specs.count("model.layers.0.mlp.gate_proj.weight"), 0u);
  specs.clear();
  for (const ParamSpec& spec : model_param_specs(small_qwen3_moe())) specs[spec.name] = spec;
  EXPECT_EQ(specs.at("model.layers.0.self_attn.q_norm.weight").shape, (Shape{12}));
  EXPECT_EQ(specs.at("model.layers.0.self_attn.k_norm.weight").init, Init::Ones);
  EXPECT_EQ(specs.at("model.layers.0.mlp.experts.down_proj.weight").shape, (Shape{5, 32, 24}));
  EXPECT_EQ(specs.at("model.layers.0.mlp.gate.weight").shape, (Shape{5, 32}));
  specs.clear();
  for (const ParamSpec& spec : model_param_specs(small_qwen2_moe())) specs[spec.name] = spec;
  EXPECT_EQ(specs.at("model.layers.1.mlp.shared_expert.gate_proj.weight").shape, (Shape{20, 32}));
  EXPECT_EQ(specs.at("model.layers.1.mlp.shared_expert.down_proj.weight").shape, (Shape{32, 20}));
  EXPECT_EQ(specs.at("model.layers.1.mlp.shared_expert_gate.weight").shape, (Shape{1, 32}));
  EXPECT_EQ(specs.at("model.layers.1.self_attn.k_proj.bias").shape, (Shape{16}));
  EXPECT_EQ(specs.count("model.layers.1.self_attn.o_proj.bias"), 0u);  // Qwen2-MoE biases q, k and v alone
  specs.clear();
  for (const ParamSpec& spec : model_param_specs(moe_config("olmoe", 2, 4, 2, 32, 24, 37, 6, 2))) {
    specs[spec.name] = spec;
  }
  EXPECT_EQ(specs.at("model.layers.0.self_attn.q_norm.weight").shape, (Shape{32}));  // over all of q
  EXPECT_EQ(specs.at("model.layers.0.self_attn.k_norm.weight").shape, (Shape{16}));
}

TEST(Moe, ConfigErrorsNameTheKey) {
  ModelConfig c = small_qwen3_moe();
  c.num_experts_per_tok = 6;
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("key 'model.num_experts_per_tok' must be in [1, 5]"));
  c = small_qwen3_moe();
  c.moe_intermediate_size = 0;
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("key 'model.moe_intermediate_size'"));
  c = moe_config("mixtral", 2, 4, 2, 32, 24, 37, 5, 2);
  c.intermediate_size = 64;
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("key 'model.intermediate_size' is not a Mixtral setting"));
  c = small_qwen3_moe();
  c.capacity_factor = -1;
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("key 'model.capacity_factor' must be 0 or positive"));
  ModelConfig llama = moe_config("llama", 2, 4, 2, 32, 0, 37, 4, 2);
  llama.intermediate_size = 40;
  llama.moe_intermediate_size = 0;
  llama.num_experts_per_tok = 0;
  EXPECT_THAT(error_of([&] { llama.validate(); }),
              HasSubstr("key 'model.num_experts' is a mixture-of-experts setting, not a LLaMA one"));
}

TEST(Moe, HfConfigRoundTripsAndRefusesWhatStrataDoesNotRun) {
  for (ModelConfig c : small_moe_models()) {
    SCOPED_TRACE(c.family);
    const ModelFamily& family = model_family(c);
    c.max_position_embeddings = 16;
    c.head_dim = c.head_size();
    c.router_z_loss_coef = 0;  // Strata's own: config.json has no z-loss
    c.router_aux_loss_coef = 0.02;
    const nlohmann::json hf = family.to_hf_config(c);
    EXPECT_EQ(hf["num_experts_per_tok"], 2);
    EXPECT_EQ(hf["output_router_logits"], true);
    EXPECT_EQ(model_config_of_hf(hf, "config.json"), c);
    nlohmann::json silent = hf;
    silent["output_router_logits"] = false;  // transformers then leaves the aux loss out of the loss
    EXPECT_EQ(family.from_hf_config(silent, "config.json").router_aux_loss_coef, 0.0);
  }
  const nlohmann::json mixtral = model_family("mixtral").to_hf_config(moe_config("mixtral", 2, 4, 2, 32, 24, 37, 5, 2));
  EXPECT_EQ(mixtral["num_local_experts"], 5);
  EXPECT_EQ(mixtral["intermediate_size"], 24);
  nlohmann::json broken = mixtral;
  broken.erase("num_local_experts");
  EXPECT_THAT(error_of([&] { model_config_of_hf(broken, "dir/config.json"); }),
              HasSubstr("dir/config.json"));
  EXPECT_THAT(error_of([&] { model_config_of_hf(broken, "dir/config.json"); }), HasSubstr("num_local_experts"));
  broken = mixtral;
  broken["router_jitter_noise"] = 0.01;
  EXPECT_THAT(error_of([&] { model_config_of_hf(broken, "c.json"); }), HasSubstr("router_jitter_noise"));
  nlohmann::json qwen = model_family("qwen3_moe").to_hf_config(small_qwen3_moe());
  EXPECT_EQ(qwen["num_experts"], 5);
  EXPECT_EQ(qwen["moe_intermediate_size"], 24);
  qwen["decoder_sparse_step"] = 2;
  EXPECT_THAT(error_of([&] { model_config_of_hf(qwen, "c.json"); }), HasSubstr("decoder_sparse_step 2"));
  qwen["decoder_sparse_step"] = 1;
  qwen["mlp_only_layers"] = {0};
  EXPECT_THAT(error_of([&] { model_config_of_hf(qwen, "c.json"); }), HasSubstr("mlp_only_layers [0]"));
  nlohmann::json olmoe = model_family("olmoe").to_hf_config(moe_config("olmoe", 2, 4, 2, 32, 24, 37, 6, 2));
  olmoe["clip_qkv"] = 8.0;
  EXPECT_THAT(error_of([&] { model_config_of_hf(olmoe, "c.json"); }), HasSubstr("clip_qkv"));
  ModelConfig no_shared = small_qwen2_moe();
  no_shared.shared_expert_intermediate_size = 0;
  EXPECT_THAT(error_of([&] { no_shared.validate(); }), HasSubstr("key 'model.shared_expert_intermediate_size'"));
}

// One training step of `config` on cpu: the loss, the cross-entropy, the router's balance and z losses,
// and the assignments routed and kept over all experts.
struct RouterStep {
  double loss, cross_entropy, balance, z, routed, kept;
};

RouterStep router_step(const ModelConfig& config) {
  ParameterSet params(model_param_specs(config));
  params.initialise(CounterRng(3));
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Error);
  ModelGraph model = build_model_graph(config, 2, 8, true);
  int cross_entropy = -1;
  for (const Node& node : model.graph.nodes()) {
    if (node.op == "cross_entropy") cross_entropy = node.outputs[0];
  }
  EXPECT_GE(model.router.balance, 0);
  const ModelGraph::RouterLosses& r = model.router;
  CompiledGraph graph(model.graph, *dispatcher, {model.loss, cross_entropy, r.balance, r.z, r.expert_tokens, r.expert_kept});
  for (size_t i = 0; i < params.size(); ++i) graph.bind(model.params[i], params.tensor(i));
  Tensor ids = Tensor::empty({2, 8}, DType::I32);
  for (int64_t i = 0; i < 16; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>((5 * i + 3) % 37);
  Tensor seed = Tensor::empty({}, DType::F32);
  seed.data<float>()[0] = 1;
  graph.bind(model.tokens, ids);
  graph.bind(model.targets, ids);
  graph.bind(model.positions, position_ids(8));
  graph.bind(model.grads.seed, seed);
  graph.run();
  auto total = [&](int value) {
    double sum = 0;
    for (int64_t e = 0; e < config.num_experts; ++e) sum += graph.tensor(value).data<float>()[e];
    return sum;
  };
  return {graph.tensor(model.loss).item(),    graph.tensor(cross_entropy).item(), graph.tensor(r.balance).item(),
          graph.tensor(r.z).item(),           total(r.expert_tokens),             total(r.expert_kept)};
}

// The training graph's loss is the cross-entropy plus the weighted router losses it reports; under a
// capacity some assignments are dropped and counted.
TEST(Moe, TrainingLossAddsTheRouterLossesAndCountsTheDropped) {
  ModelConfig config = small_qwen3_moe();
  const RouterStep dropless = router_step(config);
  EXPECT_GT(dropless.balance, 0.9);  // 1 when perfectly balanced, E at worst
  EXPECT_NEAR(dropless.loss, dropless.cross_entropy + 0.05 * dropless.balance + 0.01 * dropless.z, 1e-6);
  EXPECT_EQ(dropless.routed, 2 * 8 * 2 * 2);  // tokens × top-2 × layers
  EXPECT_EQ(dropless.kept, dropless.routed);
  config.capacity_factor = 0.5;  // ceil(0.5 * 16 * 2 / 5) = 4 of the 6.4 rows an expert averages
  const RouterStep capped = router_step(config);
  EXPECT_EQ(capped.routed, dropless.routed);
  EXPECT_LT(capped.kept, capped.routed);
  EXPECT_LE(capped.kept, 2 * 5 * 4);  // layers × experts × capacity
}

TEST(Moe, CachedDecodingMatchesTheFullForwardPass) {
  for (const ModelConfig& config : small_moe_models()) {
    ParameterSet params(model_param_specs(config));
    params.initialise(CounterRng(5));
    const std::vector<int32_t> tokens{3, 17, 5, 0, 28, 11, 9, 36};
    for (const char* backend : {"ref", "cpu"}) {
      auto dispatcher = make_dispatcher(backend, FallbackPolicy::Error);
      testing::expect_cached_decoding_matches(config, params, *dispatcher, tokens, config.family + " " + backend);
    }
  }
}

}  // namespace
}  // namespace strata
