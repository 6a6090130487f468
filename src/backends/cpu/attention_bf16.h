#pragma once
// bf16 causal attention on the CPU's bf16 dot products (cpu_attention_bf16.cpp,
// cpu_attention_backward_bf16.cpp). Callers use them only where
// has_bf16_dot() (bf16_dot.h) holds and the head size is even (operands are
// bf16 pairs along the head dimension); elsewhere the widening f32 path runs.
#include "ops/backend.h"

namespace strata::cpu {

void attention_bf16_dot(const Tensors& in, const Tensors& out, const Attrs& attrs);
void attention_backward_bf16_dot(const Tensors& in, const Tensors& out, const Attrs& attrs);

}  // namespace strata::cpu
