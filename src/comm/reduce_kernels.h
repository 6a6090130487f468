#pragma once
// Element loops of the reductions. Reductions always accumulate in fp32: bf16
// inputs are widened once, partial sums travel as fp32, and only the final
// value is rounded (and divided, for avg) into the output dtype.
#include <cstddef>

#include "comm/collective.h"
#include "core/dtype.h"

namespace strata::comm {

// dst = a (op) b, elementwise; dst may alias a or b. Avg combines as Sum.
void combine(float* dst, const float* a, const float* b, size_t count, ReduceOp op);

// dst (out_dtype) = (a (op) b) / divisor: the last combine of a result.
void combine_final(void* dst, DType out_dtype, const float* a, const float* b, size_t count, ReduceOp op,
                   float divisor);

// dst (out_dtype) = src / divisor; a no-op copy when it would change nothing.
void store_final(void* dst, DType out_dtype, const float* src, size_t count, float divisor);

// Results at least this large are written with streaming stores: they leave
// the caches anyway.
inline constexpr size_t kStreamingBytes = size_t{16} << 20;

// dst (out_dtype) = (sources[0] (op) sources[1] (op) ...) / divisor, combined
// in the order given, so every rank computing it gets the same bits. With
// `streaming`, f32 results bypass the caches (for outputs too large to stay
// there: a normal store first reads the line it overwrites).
void combine_all_final(void* dst, DType out_dtype, const float* const* sources, int source_count, size_t count,
                       ReduceOp op, float divisor, bool streaming);

// fp32 copy of f32 or bf16 values.
void widen(float* dst, const void* src, DType dtype, size_t count);

}  // namespace strata::comm
