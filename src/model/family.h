#pragma once
// The seam between a model family and everything that runs models. The
// trainer, sampler, checkpoints, planner and tools reach a family only through
// this interface (chosen by model.family), so a new family is one folder
// (model/gpt2/, model/llama/) and no branch anywhere else.
//
// A family writes its layers once, against a ModelEmitter: the graph builder's
// emitter appends them to a graph (training, the planner's per-device
// segments), the sampler's runs them eagerly with its key/value cache.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/shape.h"
#include "model/model_config.h"
#include "model/parameters.h"
#include "model/sharding_plan.h"
#include "ops/attrs.h"

namespace strata {

// Turns a family's ops into something; values are handles the emitter hands out.
class ModelEmitter {
 public:
  virtual ~ModelEmitter() = default;
  // The value of parameter `name`, whose whole shape is `shape`. An emitter may hand out a part of it
  // (the planner's holds one tensor-parallel rank's shard), so a family reads widths off the values it gets.
  virtual int param(const std::string& name, const Shape& shape) = 0;
  // The shape of a value the emitter handed out.
  virtual Shape shape(int value) const = 0;
  // Every output of the op (a router's weights and its dispatch plan).
  virtual std::vector<int> ops(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs,
                               const std::string& label) = 0;
  // The op's first output.
  int op(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs, const std::string& label) {
    return ops(op, inputs, attrs, label).at(0);
  }
  // The causal attention core: `op` is "attention" (inputs {qkv}, packed) or
  // "grouped_attention" (inputs {q, k, v}); a cache-keeping emitter keeps k and v.
  virtual int attention(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs,
                        const std::string& label) = 0;
};

// What sequence parallelism splits along the sequence between the tensor-parallel linears: the norms, the
// residual adds, the embedding's sum, the final norm; a mixture of experts' gate and shared expert, which multiply
// each position by replicated weights. Labels without the layer prefix.
struct ResidualStream {
  std::vector<std::string> ops;  // their values too; an op's gradient ops share its label, so they are on it
  // Gradient ops, by their own label, of ops off the stream that sum over it: a row-parallel linear's bias
  // gradient (its bias is added after the sum, on the stream).
  std::vector<std::string> gradient_ops;
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual std::string_view name() const = 0;
  // Throws naming the model.* key this family cannot take.
  virtual void validate(const ModelConfig& config) const = 0;
  // Every parameter, HuggingFace name and layout, in a fixed order, with its initialisation.
  virtual std::vector<ParamSpec> param_specs(const ModelConfig& config) const = 0;
  // How the parameters split under tensor parallelism.
  virtual ShardingPlan sharding_plan() const = 0;
  // Parameter names and op labels of layer i start with layer_prefix() + i + ".".
  virtual std::string_view layer_prefix() const = 0;
  // The parameter the LM head shares with the token embedding; "" when untied.
  virtual std::string tied_embedding(const ModelConfig& config) const = 0;
  // The width of one position's keys (and values): what a key/value cache holds per token.
  virtual int64_t kv_width(const ModelConfig& config) const = 0;
  // The labels of the ops on the residual stream (the planner prices sequence parallelism's split of them).
  virtual ResidualStream residual_stream() const = 0;
  // Model FLOPs of training on one token of a block_size sequence, forward and backward (no
  // recomputation): the numerator of the trainer's MFU. This default is a dense transformer's, in the
  // form of PaLM's appendix B, 6·N + 12·L·H·Q·T (T = block_size), with N every parameter (embeddings
  // included, a tied head once) as llm.c counts. A family whose tokens do not each pass through every
  // parameter (a mixture of experts: only the active experts count) overrides it.
  virtual double training_flops_per_token(const ModelConfig& config) const;

  // The layers, their parameters declared whole; head counts and widths follow the values the emitter
  // hands out (ModelEmitter::param). `positions` [T] i32 are the tokens' absolute positions.
  virtual int embed(ModelEmitter& e, const ModelConfig& config, int tokens, int positions) const = 0;
  virtual int block(ModelEmitter& e, const ModelConfig& config, int x, int positions,
                    const std::string& prefix) const = 0;
  virtual int final_norm(ModelEmitter& e, const ModelConfig& config, int x) const = 0;
  virtual int lm_head(ModelEmitter& e, const ModelConfig& config, int normed) const = 0;

  // The parameter a HuggingFace weights file's tensor `stored` is: the name itself, or the
  // spelling of the bare model class (GPT2Model, LlamaModel) prefixed; "" for the buffers some
  // files carry (causal masks, rotary frequencies), which are not parameters.
  virtual std::string parameter_of_hf_tensor(const std::string& stored) const = 0;
  // Where a file's tensor goes when it is one expert's weight of a parameter stacked over the experts
  // (the Hub stores experts.{e}.w1.weight; a MoE family stacks them in experts.w1.weight): that
  // parameter and the expert e, the slice along its first dim; nullopt for every other tensor.
  struct ExpertSlice {
    std::string parameter;
    int64_t expert = 0;
  };
  virtual std::optional<ExpertSlice> expert_slice_of_hf_tensor(const std::string& stored) const;
  // The inverse: the name the Hub gives expert `expert`'s slice of stacked parameter `parameter`.
  virtual std::string hf_tensor_of_expert_slice(const std::string& parameter, int64_t expert) const;
  // transformers' packed form of a layer's experts (`<block>experts.gate_up_proj` [E, 2F, C]: each expert's
  // gate projection's rows, then its up projection's; `<block>experts.down_proj` [E, C, F]): the stacked
  // parameters `stored` holds, in their order along its second dim; empty for every other tensor.
  virtual std::vector<std::string> parameters_of_packed_experts(const std::string& stored) const;
  // Whether `parameter` is stacked over the experts (its first dim), so the Hub stores it one tensor per expert.
  virtual bool stacked_over_experts(const std::string& parameter) const;
  // HuggingFace config.json: the model config it describes (`source` names the file in errors),
  // and the one to write for `config`.
  virtual ModelConfig from_hf_config(const nlohmann::json& hf, const std::string& source) const = 0;
  virtual nlohmann::json to_hf_config(const ModelConfig& config) const = 0;
};

// The family model.family names; throws naming the key and the families there are.
const ModelFamily& model_family(std::string_view name);
inline const ModelFamily& model_family(const ModelConfig& config) { return model_family(config.family); }
std::vector<std::string> model_family_names();
// The model a HuggingFace config.json describes, by its model_type's family; `source` names the
// file in errors (a model_type no family has among them).
ModelConfig model_config_of_hf(const nlohmann::json& hf, const std::string& source);

// Conveniences over the family of `config`.
std::vector<ParamSpec> model_param_specs(const ModelConfig& config);
std::string layer_prefix(const ModelConfig& config, int64_t layer);

}  // namespace strata
