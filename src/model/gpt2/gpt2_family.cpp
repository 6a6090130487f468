#include "model/gpt2/gpt2_family.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/hf_config_reader.h"

namespace strata {

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// transformer.wte.weight [V, C], transformer.wpe.weight [P, C],
// transformer.h.{i}.ln_1.{weight,bias}, .attn.c_attn.{weight [C, 3C], bias},
// .attn.c_proj.{weight [C, C], bias}, .ln_2.*, .mlp.c_fc.{weight [C, F], bias},
// .mlp.c_proj.{weight [F, C], bias}, transformer.ln_f.*.
class GPT2Family final : public ModelFamily {
 public:
  std::string_view name() const override { return "gpt2"; }

  void validate(const ModelConfig& c) const override {
    if (c.n_embd % c.n_head != 0) fail("key 'model.n_head' ({}) must divide 'model.n_embd' ({})", c.n_head, c.n_embd);
    auto unused = [](const char* key, bool set) {
      if (set) fail("key 'model.{}' is not a GPT-2 setting (model.family = \"gpt2\")", key);
    };
    unused("n_kv_head", c.n_kv_head != 0 && c.n_kv_head != c.n_head);
    unused("head_dim", c.head_dim != 0 && c.head_dim != c.n_embd / c.n_head);
    unused("rope_scaling", c.rope_scaling.type != "none");
    unused("tie_word_embeddings", !c.tie_word_embeddings);
    unused("attention_bias", c.attention_bias);
    unused("mlp_bias", c.mlp_bias);
    c.expect_dense("GPT-2");
  }

  std::vector<ParamSpec> param_specs(const ModelConfig& config) const override {
    const int64_t c = config.n_embd, f = hidden(config);
    // GPT-2's initialisation: normal(0, 0.02), the residual output projections
    // normal(0, 0.02 / sqrt(2 * n_layer)), biases 0, LayerNorm weights 1.
    const float stddev = 0.02f;
    const float residual_stddev = stddev / std::sqrt(2.0f * static_cast<float>(config.n_layer));
    std::vector<ParamSpec> specs;
    auto weight = [&](const std::string& name, Shape shape, float sd) {
      specs.push_back({name, std::move(shape), Init::Normal, sd, true});
    };
    auto bias = [&](const std::string& name, int64_t size) { specs.push_back({name, {size}, Init::Zeros, 0, false}); };
    auto norm = [&](const std::string& name) {
      specs.push_back({name + ".weight", {c}, Init::Ones, 0, false});
      bias(name + ".bias", c);
    };
    weight("transformer.wte.weight", {config.vocab_size, c}, stddev);
    weight("transformer.wpe.weight", {positions(config), c}, stddev);
    for (int64_t layer = 0; layer < config.n_layer; ++layer) {
      const std::string p = strata::layer_prefix(config, layer);
      norm(p + "ln_1");
      weight(p + "attn.c_attn.weight", {c, 3 * c}, stddev);
      bias(p + "attn.c_attn.bias", 3 * c);
      weight(p + "attn.c_proj.weight", {c, c}, residual_stddev);
      bias(p + "attn.c_proj.bias", c);
      norm(p + "ln_2");
      weight(p + "mlp.c_fc.weight", {c, f}, stddev);
      bias(p + "mlp.c_fc.bias", f);
      weight(p + "mlp.c_proj.weight", {f, c}, residual_stddev);
      bias(p + "mlp.c_proj.bias", c);
    }
    norm("transformer.ln_f");
    return specs;
  }

  // Megatron's split: c_attn (q, k and v each split by heads) and c_fc column-parallel, the two
  // c_proj row-parallel (their biases replicated, added after the sum), the tied token embedding
  // vocab-parallel (the LM head and the loss then work on vocabulary shards); norms and positions
  // replicated.
  ShardingPlan sharding_plan() const override {
    return {{
        {"transformer.h.*.attn.c_attn.*", ShardStyle::ColumnParallel, 3},
        {"transformer.h.*.mlp.c_fc.*", ShardStyle::ColumnParallel, 1},
        {"transformer.h.*.c_proj.weight", ShardStyle::RowParallel, 1},
        {"transformer.wte.weight*", ShardStyle::VocabParallel, 1},  // and the LM head's copy
    }};
  }

  std::string_view layer_prefix() const override { return "transformer.h."; }
  ResidualStream residual_stream() const override {
    return {{"embed", "ln_1", "attn.residual", "ln_2", "mlp.residual", "transformer.ln_f"},
            {"attn.c_proj.grad_bias", "mlp.c_proj.grad_bias"}};
  }
  std::string tied_embedding(const ModelConfig&) const override { return "transformer.wte.weight"; }
  int64_t kv_width(const ModelConfig& config) const override { return config.n_embd; }

  int embed(ModelEmitter& e, const ModelConfig& config, int tokens, int positions_in) const override {
    const int wte = e.param("transformer.wte.weight", {config.vocab_size, config.n_embd});
    const int wpe = e.param("transformer.wpe.weight", {positions(config), config.n_embd});
    return e.op("add", {e.op("embedding", {wte, tokens}, {}, "wte"), e.op("embedding", {wpe, positions_in}, {}, "wpe")},
                {}, "embed");
  }

  // The attention runs the heads the emitter's c_attn holds (all, or the planner's tensor-parallel share).
  int block(ModelEmitter& e, const ModelConfig& config, int x, int, const std::string& prefix) const override {
    const int64_t c = config.n_embd, f = hidden(config);
    const int qkv = linear(e, layernorm(e, config, x, prefix + "ln_1"), prefix + "attn.c_attn", c, 3 * c);
    const int64_t heads = e.shape(qkv).back() / (3 * config.head_size());
    const int attended = e.attention("attention", {qkv}, {{"n_head", heads}}, prefix + "attn");
    x = e.op("add", {x, linear(e, attended, prefix + "attn.c_proj", c, c)}, {}, prefix + "attn.residual");
    int h = linear(e, layernorm(e, config, x, prefix + "ln_2"), prefix + "mlp.c_fc", c, f);
    h = e.op("gelu", {h}, {}, prefix + "mlp.gelu");
    return e.op("add", {x, linear(e, h, prefix + "mlp.c_proj", f, c)}, {}, prefix + "mlp.residual");
  }

  int final_norm(ModelEmitter& e, const ModelConfig& config, int x) const override {
    return layernorm(e, config, x, "transformer.ln_f");
  }

  // Logits through the tied token embedding.
  int lm_head(ModelEmitter& e, const ModelConfig& config, int normed) const override {
    const int wte = e.param("transformer.wte.weight", {config.vocab_size, config.n_embd});
    return e.op("matmul", {normed, wte}, {{"trans_a", false}, {"trans_b", true}}, "lm_head");
  }

  std::string parameter_of_hf_tensor(const std::string& stored) const override {
    if (ends_with(stored, ".attn.bias") || ends_with(stored, ".attn.masked_bias")) return "";  // causal masks
    if (stored == "lm_head.weight" || stored.rfind("transformer.", 0) == 0) return stored;
    return "transformer." + stored;
  }

  ModelConfig from_hf_config(const nlohmann::json& hf, const std::string& source) const override {
    HfConfigReader read(hf, source);
    read.expect_model_type("gpt2");
    ModelConfig c;
    c.family = "gpt2";
    c.n_layer = read.integer("n_layer");
    c.n_head = read.integer("n_head");
    c.n_embd = read.integer("n_embd");
    c.vocab_size = read.integer("vocab_size");
    c.max_position_embeddings = read.integer("n_positions");
    c.block_size = c.max_position_embeddings;
    c.layer_norm_eps = read.number_or("layer_norm_epsilon", 1e-5);
    const int64_t inner = read.integer_or("n_inner", 4 * c.n_embd);
    if (inner != 4 * c.n_embd) c.intermediate_size = inner;
    const std::string activation = read.string_or("activation_function", "gelu_new");
    if (activation != "gelu_new" && activation != "gelu_pytorch_tanh") {
      fail("{}: activation_function \"{}\" is not GPT-2's tanh GELU (\"gelu_new\"), the one Strata runs", source,
           activation);
    }
    if (!read.boolean_or("tie_word_embeddings", true)) fail("{}: an untied GPT-2 head is not supported", source);
    return c;
  }

  nlohmann::json to_hf_config(const ModelConfig& model) const override {
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"vocab_size", model.vocab_size},
            {"n_positions", positions(model)},
            {"n_ctx", positions(model)},
            {"n_embd", model.n_embd},
            {"n_layer", model.n_layer},
            {"n_head", model.n_head},
            {"n_inner", hidden(model)},
            {"activation_function", "gelu_new"},  // the tanh approximation
            {"layer_norm_epsilon", model.layer_norm_eps},
            {"resid_pdrop", 0.0},
            {"embd_pdrop", 0.0},
            {"attn_pdrop", 0.0},
            {"initializer_range", 0.02},
            {"tie_word_embeddings", true},
            {"torch_dtype", "float32"}};
  }

 private:
  static int64_t hidden(const ModelConfig& c) { return c.intermediate_size > 0 ? c.intermediate_size : 4 * c.n_embd; }
  // Rows of the position table: what the checkpoint was made for, else the training length.
  static int64_t positions(const ModelConfig& c) {
    return c.max_position_embeddings > 0 ? c.max_position_embeddings : c.block_size;
  }
  static int layernorm(ModelEmitter& e, const ModelConfig& config, int x, const std::string& name) {
    return e.op("layernorm",
                {x, e.param(name + ".weight", {config.n_embd}), e.param(name + ".bias", {config.n_embd})},
                {{"eps", config.layer_norm_eps}}, name);
  }
  static int linear(ModelEmitter& e, int x, const std::string& name, int64_t in, int64_t out) {
    return e.op("linear", {x, e.param(name + ".weight", {in, out}), e.param(name + ".bias", {out})}, {}, name);
  }
};

}  // namespace

const ModelFamily& gpt2_family() {
  static const GPT2Family family;
  return family;
}

}  // namespace strata
