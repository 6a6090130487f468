#include "planner/eager_work.h"

#include <string>

namespace strata {

namespace {

constexpr double kF32 = 4;  // the decompositions compute in fp32 between their casts

// The decomposition's bytes per element (one term per kernel, what it reads plus what it writes; `a` an
// activation, kF32 an upcast copy) less the fused kernel's, which reads its inputs and writes its outputs once.
EagerExtra extra(double eager_forward, double eager_backward, double fused_forward, double fused_backward) {
  return {eager_forward - fused_forward, eager_backward - fused_backward};
}

// The extra traffic of `count` ops of `elements` each, beside the fused op `name`: redone by selective
// recomputation when the fused op is, on the residual stream when it is.
void add_extra(SegmentWork& layer, const std::string& name, int count, double elements, const EagerExtra& bytes) {
  const OpWork* fused = first_op_named(layer.forward, name);
  if (fused == nullptr) return;
  OpWork forward{"eager_" + name, "eager." + name, OpKind::Other, 0, count * elements * bytes.forward};
  forward.residual_stream = fused->residual_stream;
  forward.selective_recompute = fused->selective_recompute;
  OpWork backward{"eager_" + name + "_backward", "eager." + name + ".grad", OpKind::Other, 0,
                  count * elements * bytes.backward};
  backward.residual_stream = fused->residual_stream;
  layer.forward.push_back(forward);
  layer.backward.push_back(backward);
}

}  // namespace

EagerExtra eager_rms_norm_extra(double a) {
  const double f = kF32;
  // Forward: float() a+f, pow(2) f+f, mean f, * rsqrt f+f, type_as f+a, * weight a+a.
  const double forward = (a + f) + (f + f) + f + (f + f) + (f + a) + (a + a);
  // Backward: * weight (input 2a; weight's g*out 3a and row sum a), type_as a+f, * rsqrt (input f+f; rsqrt's
  // g*x 3f and row sum f), mean's expand f, pow's 2x f+f and * g 3f, x's two gradients summed 3f, float() f+a.
  const double backward = (2 * a + 4 * a) + (a + f) + (2 * f + 4 * f) + f + (2 * f + 3 * f) + 3 * f + (f + a);
  return extra(forward, backward, 2 * a, 3 * a);
}

EagerExtra eager_rope_extra(double a) {
  const double f = kF32;
  // float() a+f, complex product with the frequencies f+f, type_as f+a; backward the same three in reverse.
  const double each_way = (a + f) + (f + f) + (f + a);
  return extra(each_way, each_way, 2 * a, 2 * a);
}

EagerExtra eager_swiglu_extra(double a) {
  // silu(gate) a+a, * up 3a; backward the product's two gradients 3a each and silu's derivative 3a.
  // Fused: gate and up read, the product written; backward gate, up and the gradient read, two gradients written.
  return extra(2 * a + 3 * a, 3 * a + 3 * a + 3 * a, 3 * a, 5 * a);
}

void add_eager_elementwise(SegmentWork& layer, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp,
                           DType dtype) {
  const double a = static_cast<double>(dtype_size(dtype));
  const double rows = static_cast<double>(micro_batch * seq);
  add_extra(layer, "rms_norm", 2, rows * static_cast<double>(config.n_embd), eager_rms_norm_extra(a));
  add_extra(layer, "rope", 1, rows * static_cast<double>((config.n_head + config.kv_heads()) / tp * config.head_size()),
            eager_rope_extra(a));
  add_extra(layer, "swiglu", 1, rows * static_cast<double>(config.intermediate_size / tp), eager_swiglu_extra(a));
}

}  // namespace strata
