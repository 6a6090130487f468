#pragma once
// The cross_entropy shapes that the cpu tests (loss_norm_test.cpp) and the
// opencl tests (opencl_vocab_test.cpp) share.
#include "cpu_test_util.h"

namespace strata::testing {

// Logits [..., V] scaled by `scale`, targets stored as `targets`.
struct CrossEntropyCase {
  Shape logits;
  float scale;
  DType targets;
};

inline const CrossEntropyCase kCrossEntropyCases[] = {
    {{7, 1000}, 1.0f, DType::I64},
    {{2, 3, 50257}, 3.0f, DType::I32},  // GPT-2's vocabulary, not a multiple of any chunk
    {{1, 13}, 10.0f, DType::I64},       // one position, peaked
};

}  // namespace strata::testing
