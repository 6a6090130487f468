#pragma once
// The whole model's value from a tensor-parallel group's tensors of it, by
// the layout the tensor-parallel pass recorded (model/value_layout.h): what
// `strata compare` puts back together before comparing two layouts.
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/value_layout.h"

namespace strata {

// `pieces` are the group's tensors in rank order. Whole: the first rank's (the others must have its
// shape). Split: the pieces side by side along the dim, part by part (rank r's piece of each fused
// part follows rank r - 1's). Partial: the sum of the terms, in rank order, in f64. `name` is for errors.
Tensor assemble_value(const std::string& name, const std::vector<Tensor>& pieces, const ValueLayout& layout);

}  // namespace strata
