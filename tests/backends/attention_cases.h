#pragma once
// The attention shapes and checks that the cpu tests (attention_test.cpp,
// grouped_attention_test.cpp) and the opencl tests (opencl_attention_test.cpp)
// share, so that every backend meets the same cases.
#include <algorithm>
#include <string>

#include "cpu_test_util.h"

namespace strata::testing {

// Packed attention, qkv [B, T, 3 * H * D] scaled by `scale`: T not a multiple
// of the kernels' tiles, head sizes that are and are not multiples of 16, a
// single position, and peaked softmaxes (scale 3).
struct PackedAttentionCase {
  int64_t batch, seq, heads, head_dim;
  float scale;
};

inline const PackedAttentionCase kPackedAttentionCases[] = {
    {2, 67, 3, 64, 1.0f}, {1, 130, 2, 80, 1.0f}, {3, 1, 4, 8, 1.0f},  {2, 5, 4, 24, 3.0f},
    {1, 64, 1, 16, 1.0f}, {1, 200, 2, 20, 3.0f}, {2, 129, 2, 64, 3.0f},
};

inline std::string label(const PackedAttentionCase& c) {
  return "B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) + " H=" + std::to_string(c.heads) +
         " D=" + std::to_string(c.head_dim) + " scale=" + std::to_string(c.scale);
}

// attention on `backend` against ref over kPackedAttentionCases.
inline void check_attention_against_ref(const std::string& backend, double tol) {
  for (const PackedAttentionCase& c : kPackedAttentionCases) {
    Tensor qkv = random_f32({c.batch, c.seq, 3 * c.heads * c.head_dim}, 100 + c.seq, c.scale);
    check_backend_against_ref(backend, "attention", {qkv}, {{"n_head", c.heads}}, tol, "attention " + label(c));
  }
}

// attention_backward on `backend` against ref over kPackedAttentionCases, from ref's forward.
inline void check_attention_backward_against_ref(const std::string& backend, double tol) {
  for (const PackedAttentionCase& c : kPackedAttentionCases) {
    int64_t width = c.heads * c.head_dim;
    Tensor qkv = random_f32({c.batch, c.seq, 3 * width}, 200 + c.seq, c.scale);
    Attrs attrs{{"n_head", c.heads}};
    Tensors forward = run_on("ref", "attention", {qkv}, attrs);
    Tensor dout = random_f32({c.batch, c.seq, width}, 300 + c.seq);
    check_backend_against_ref(backend, "attention_backward", {dout, qkv, forward[0], forward[1]}, attrs, tol,
                              "attention_backward " + label(c));
  }
}

// Grouped attention, q [B, T, H * D], k and v [B, T, KV * D]: one kv head for
// all query heads, several, and one each; T = 1, 37, 70 and 130; head sizes
// 64, 80 and an odd 7; plain and peaked (scale 3) softmaxes.
struct GroupedAttentionCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
  float scale;
};

inline const GroupedAttentionCase kGroupedAttentionCases[] = {
    {2, 37, 4, 1, 64, 1.0f},  {1, 130, 4, 2, 64, 3.0f}, {2, 1, 4, 4, 64, 1.0f}, {1, 130, 4, 1, 80, 1.0f},
    {2, 37, 6, 2, 80, 3.0f},  {1, 130, 2, 2, 80, 1.0f}, {2, 1, 4, 1, 80, 1.0f}, {1, 37, 4, 4, 64, 3.0f},
    {2, 70, 4, 2, 7, 1.0f},  // an odd head size: cpu bf16 takes the widening kernels even with bf16 dot products
};

inline std::string label(const GroupedAttentionCase& c) {
  return "B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) + " H=" + std::to_string(c.heads) +
         " KV=" + std::to_string(c.kv_heads) + " D=" + std::to_string(c.head_dim);
}

// With one kv head per query head the grouped ops on `backend` read q, k and v
// where the packed ops read the thirds of qkv, through the same kernels, and
// must give the same bits, forward and backward; `where` ends each label.
inline void expect_one_kv_head_per_query_head_is_packed_attention(const std::string& backend, DType dtype,
                                                                   const std::string& where) {
  for (int64_t head_dim : {64, 80}) {
    const int64_t batch = 2, seq = 130, heads = 3, width = heads * head_dim;
    std::string what = std::string(dtype_name(dtype)) + " D=" + std::to_string(head_dim) + where;
    Tensor qkv = random_f32({batch, seq, 3 * width}, 7, 2.0f).to(dtype);
    Tensor q = qkv.narrow(2, 0, width).clone(), k = qkv.narrow(2, width, width).clone();
    Tensor v = qkv.narrow(2, 2 * width, width).clone();
    Tensor dout = random_f32({batch, seq, width}, 8).to(dtype);
    Attrs packed{{"n_head", heads}}, grouped{{"n_head", heads}, {"n_kv_head", heads}};
    Tensors attention = run_on(backend, "attention", {qkv}, packed);
    Tensors grouped_out = run_on(backend, "grouped_attention", {q, k, v}, grouped);
    expect_identical(grouped_out[0], attention[0], what + " out");
    expect_identical(grouped_out[1], attention[1], what + " lse");
    Tensor dqkv = run_on(backend, "attention_backward", {dout, qkv, attention[0], attention[1]}, packed)[0];
    Tensors grads = run_on(backend, "grouped_attention_backward", {dout, q, k, v, attention[0], attention[1]}, grouped);
    for (int64_t part = 0; part < 3; ++part) {
      expect_identical(grads[static_cast<size_t>(part)], dqkv.narrow(2, part * width, width).clone(),
                       what + " gradient " + std::to_string(part));
    }
  }
}

// The gradients side by side, flattened: at T = 1 dq and dk are exactly 0
// (one key: out = v), and elsewhere they cancel along rows, so, as attention's
// dqkv is, they are judged against the rms of all three together.
inline Tensor side_by_side(const Tensors& grads) {
  int64_t total = 0;
  for (const Tensor& grad : grads) total += grad.numel();
  Tensor joined = Tensor::empty({total}, DType::F64);
  double* next = joined.data<double>();
  for (const Tensor& grad : grads) {
    Tensor wide = grad.to(DType::F64);
    next = std::copy_n(wide.data<double>(), wide.numel(), next);
  }
  return joined;
}

}  // namespace strata::testing
