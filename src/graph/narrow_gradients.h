#pragma once
// Gradients kept in the dtype they are computed in. Under mixed precision a
// parameter's gradient is made in bf16 (or f16) and widened to f32 by a cast,
// so that micro-batches and ranks sum it in f32. A step that sums nothing (one
// micro-batch on one rank) needs no widened copy: the cast copies it in its
// own dtype instead, into the gradient's storage, under the cast's name. The
// numbers are the same (widening is exact); the copy writes half the bytes,
// and the norm and the optimizer read half. A copy, not the product itself:
// the product is written where the memory plan puts it, in cache, and a
// GEMM writing straight into the gradient's storage, cold, measured slower
// here than the copy it saves.
#include <set>

#include "graph/rewrite.h"

namespace strata {

// Each of `gradients` that a cast to f32 makes from a bf16 or f16 value that
// nothing else reads, and that no node reads, becomes a copy of that value.
GraphRewriter::Result keep_gradients_narrow(const Graph& graph, const std::set<int>& gradients);

}  // namespace strata
