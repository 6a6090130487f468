#include "model/moe/moe_block.h"

#include "model/llama/llama_layers.h"

namespace strata {

namespace {

constexpr float kStddev = 0.02f;  // transformers' initializer_range, for the router and the experts

// Qwen2MoeSparseMoeBlock's shared expert: sigmoid(shared_expert_gate(h)) * shared_expert(h), a SwiGLU
// MLP every token passes through.
int shared_expert(ModelEmitter& e, const ModelConfig& config, int h, const std::string& block) {
  const int64_t c = config.n_embd, s = config.shared_expert_intermediate_size;
  const std::string mlp = block + "shared_expert.";
  const int act = e.op("swiglu", {llama::linear(e, h, mlp + "gate_proj", c, s, false),
                                  llama::linear(e, h, mlp + "up_proj", c, s, false)},
                       {}, mlp + "act");
  const int gate = llama::linear(e, h, block + "shared_expert_gate", c, 1, false);
  return e.op("sigmoid_gate", {llama::linear(e, act, mlp + "down_proj", s, c, false), gate}, {}, block + "shared_gate");
}

}  // namespace

std::string stacked_expert_name(const MoeFlavour& flavour, const std::string& prefix, const std::string& proj) {
  return prefix + flavour.block + "experts." + proj + ".weight";
}

// transformers' sparse MoE forward: router_logits = gate(h); routing weights = softmax in f32, top-k,
// renormalised under norm_topk_prob; each token through its experts' down(silu(gate(x)) * up(x)),
// weighted and summed. Here the tokens are sorted by expert once and every expert runs in one grouped GEMM.
int sparse_moe_block(ModelEmitter& e, const ModelConfig& config, const MoeFlavour& flavour, int h,
                     const std::string& prefix) {
  const int64_t c = config.n_embd, f = config.moe_intermediate_size, experts = config.num_experts;
  const std::string block = prefix + flavour.block;
  const int logits = e.op("matmul", {h, e.param(block + "gate.weight", {experts, c})},
                          {{"trans_a", false}, {"trans_b", true}}, block + "gate");
  const std::vector<int> route =
      e.ops("moe_route", {logits},
            {{"top_k", config.num_experts_per_tok},
             {"scoring", std::string("softmax")},
             {"norm_topk_prob", flavour.always_norm_topk || config.norm_topk_prob},
             {"capacity_factor", config.capacity_factor}},
            block + "router");
  const int weights = route[0], rows = route[2], group_sizes = route[3];
  const int tokens = e.op("moe_permute", {h, rows}, {}, block + "dispatch");
  auto experts_op = [&](const std::string& proj, int x, int64_t out, int64_t in) {
    const int w = e.param(stacked_expert_name(flavour, prefix, proj), {experts, out, in});
    return e.op("grouped_matmul", {x, w, group_sizes}, {{"trans_b", true}}, block + "experts." + proj);
  };
  const int gate = experts_op(flavour.gate_proj, tokens, f, c);
  const int up = experts_op(flavour.up_proj, tokens, f, c);
  const int act = e.op("swiglu", {gate, up}, {}, block + "experts.act");
  const int down = experts_op(flavour.down_proj, act, c, f);
  const int routed = e.op("moe_combine", {down, weights, rows}, {}, block + "combine");
  if (!flavour.shared_expert) return routed;
  return e.op("add", {routed, shared_expert(e, config, h, block)}, {}, block + "shared_expert.sum");
}

void add_sparse_moe_specs(std::vector<ParamSpec>& specs, const ModelConfig& config, const MoeFlavour& flavour,
                          const std::string& prefix) {
  const int64_t c = config.n_embd, f = config.moe_intermediate_size, experts = config.num_experts;
  auto weight = [&](const std::string& name, Shape shape) {
    specs.push_back({name, std::move(shape), Init::Normal, kStddev, true});
  };
  weight(prefix + flavour.block + "gate.weight", {experts, c});
  weight(stacked_expert_name(flavour, prefix, flavour.gate_proj), {experts, f, c});
  weight(stacked_expert_name(flavour, prefix, flavour.up_proj), {experts, f, c});
  weight(stacked_expert_name(flavour, prefix, flavour.down_proj), {experts, c, f});
  if (!flavour.shared_expert) return;
  const std::string shared = prefix + flavour.block + "shared_expert.";
  const int64_t s = config.shared_expert_intermediate_size;
  llama::add_linear_specs(specs, shared + "gate_proj", s, c, false);
  llama::add_linear_specs(specs, shared + "up_proj", s, c, false);
  llama::add_linear_specs(specs, shared + "down_proj", c, s, false);
  llama::add_linear_specs(specs, prefix + flavour.block + "shared_expert_gate", 1, c, false);
}

}  // namespace strata
