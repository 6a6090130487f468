#include "planner/embedding_grad_work.h"

namespace strata {

namespace {
constexpr double kF32 = 4;  // the optimizer's gradient bucket for the embedding
}  // namespace

double embedding_grad_add_bytes(DType dtype) {
  // grad_out.add_(grad_in): the gradient read, the fp32 bucket read and written in place.
  return static_cast<double>(dtype_size(dtype)) + kF32 + kF32;
}

void add_embedding_grad_add(SegmentWork& embedding, DType dtype) {
  if (embedding.params <= 0) return;
  embedding.backward.push_back(OpWork{"embedding_grad_add", "embedding.grad_add", OpKind::Other, 0,
                                      embedding.params * embedding_grad_add_bytes(dtype)});
}

}  // namespace strata
