// The cpu backend's bf16 kernels (and its f16 casts) against ref on the same
// bf16 inputs. Both compute from identical inputs and round each output once
// to bf16; they differ only by the arithmetic before that rounding (ref: f64;
// cpu: f32, a polynomial e^x, oneDNN's f32 accumulation), which is far below
// half a bf16 ulp (2^-9 relative). So an output may land one bf16 ulp apart
// where its exact value lies near a rounding boundary, and one ulp is at most
// 2^-7 of the value: bf16 outputs are allowed 2^-7 of |expected| + rms
// (measured worst: 3.7e-3, such one-ulp flips in attention's backward, which
// chains three f32 products; matmul, add and sum_to matched ref bit for bit).
// f32 outputs (lse, the loss, sum_squares) keep the f32 tolerances of the
// other tests.
// Each comparison also runs the cpu kernel twice and requires identical bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "backends/cpu/bf16_dot.h"
#include "cast_checks.h"
#include "cpu_test_util.h"

namespace strata::testing {
namespace {

constexpr double kBf16Tol = 1.0 / 128;

Tensor random_bf16(const Shape& shape, uint64_t seed, float scale = 1.0f) {
  return random_f32(shape, seed, scale).to(DType::BF16);
}

// Runs `op` on cpu (twice) and ref, comparing output i with tols[i].
Tensors check_outputs(const std::string& op, const Tensors& inputs, const Attrs& attrs,
                      const std::vector<double>& tols, const std::string& what) {
  Tensors cpu = run_on("cpu", op, inputs, attrs);
  Tensors ref = run_on("ref", op, inputs, attrs);
  Tensors again = run_on("cpu", op, inputs, attrs);
  for (size_t i = 0; i < cpu.size(); ++i) {
    std::string label = what + " output " + std::to_string(i);
    EXPECT_EQ(cpu[i].dtype(), ref[i].dtype()) << label;
    expect_close(cpu[i], ref[i], tols.at(i), label);
    expect_identical(cpu[i], again[i], label);
  }
  return cpu;
}

Attrs gemm_attrs(bool trans_a, bool trans_b) { return {{"trans_a", trans_a}, {"trans_b", trans_b}}; }

// ---- cast -------------------------------------------------------------------

TEST(CpuBf16, CastRoundsLikeRefOnSpecialValues) { expect_casts_of_special_values_match_ref("cpu"); }

TEST(CpuBf16, CastMatchesRefOnRandomValuesAcrossChunks) { expect_casts_of_random_values_match_ref("cpu", 1); }

// The narrowing to bf16 runs on the CPU's conversion instruction where it has
// one, which flushes subnormal inputs: every bit pattern, subnormals alone or
// among normal values in a vector of 16, ties to even, NaNs with payloads and
// infinities, narrows to ref's bits (a NaN to a NaN).
TEST(CpuBf16, CastNarrowsEveryKindOfF32AsRefDoes) {
  std::vector<uint32_t> words;
  uint64_t state = 88172645463325252ull;
  auto next = [&] {  // xorshift64: bit patterns of every kind
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<uint32_t>(state >> 16);
  };
  for (int i = 0; i < 4000; ++i) words.push_back(next());
  for (uint32_t special : {0x00000001u, 0x80000001u, 0x007FFFFFu, 0x00008000u, 0x00018000u, 0x807F8000u, 0x3F808000u,
                           0x3F818000u, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00001u, 0x7F800001u, 0xFFA12345u}) {
    words.push_back(special);
  }
  for (int i = 0; i < 48; ++i) words.push_back(i % 16 == 5 ? 0x00012345u : 0x3F800000u + static_cast<uint32_t>(i));
  expect_same_cast("cpu", f32_from_bits(words), DType::BF16, "bit patterns");
}

// Outputs of 1 MiB and more, widened to f32 or copied in bf16, take streaming
// stores from their first 64-byte boundary on: an output starting 12 bytes
// past one, and one 2 bytes past (for f32 never aligned: plain stores), each
// of an odd length, get ref's bits everywhere, and the bytes around them are
// left alone.
TEST(CpuBf16, CastWritesLargeOutputsAtAnyAlignmentAsRefDoes) {
  const int64_t count = (int64_t{1} << 19) + 37;  // just over 1 MiB of bf16
  const Tensor x = random_f32({count}, 7, 3.0f).to(DType::BF16);
  const Tensor words = Tensor::empty({count + 32}, DType::F32);
  for (DType dtype : {DType::F32, DType::BF16}) {
    const Attrs to{{"dtype", std::string(dtype_name(dtype))}};
    const Tensor ref = run_on("ref", "cast", {x}, to)[0];
    for (int64_t offset_bytes : {12, 2}) {
      std::fill_n(static_cast<unsigned char*>(words.raw()), words.nbytes(), 0xAB);
      auto* start = static_cast<unsigned char*>(words.raw()) + offset_bytes;
      const Tensor view = Tensor::borrow(start, {count}, dtype);
      dispatcher("cpu").run("cast", {x}, {view}, to);
      const std::string what =
          std::string(dtype_name(dtype)) + " output " + std::to_string(offset_bytes) + " bytes past an aligned start";
      EXPECT_EQ(std::memcmp(view.raw(), ref.raw(), ref.nbytes()), 0) << what;
      for (int64_t i = 0; i < offset_bytes; ++i) EXPECT_EQ(static_cast<unsigned char*>(words.raw())[i], 0xAB) << what;
      const unsigned char* after = start + ref.nbytes();
      for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(after[i], 0xAB) << what << ": byte " << i << " after the output";
    }
  }
}

// ---- matmul and linear ------------------------------------------------------

TEST(CpuBf16, MatmulMatchesRefOnOddShapes) {
  check_outputs("matmul", {random_bf16({3, 5, 37}, 1), random_bf16({37, 29}, 2)}, gemm_attrs(false, false),
                {kBf16Tol}, "[3,5,37] x [37,29]");
  check_outputs("matmul", {random_bf16({1, 384}, 3), random_bf16({384, 200}, 4)}, gemm_attrs(false, false),
                {kBf16Tol}, "one row");
  check_outputs("matmul", {random_bf16({130, 1536}, 5), random_bf16({1536, 70}, 6)}, gemm_attrs(false, false),
                {kBf16Tol}, "K = 1536");
  check_outputs("matmul", {random_bf16({2, 33, 48}, 7), random_bf16({101, 48}, 8)}, gemm_attrs(false, true),
                {kBf16Tol}, "[2,33,48] x [101,48]^T");
  check_outputs("matmul", {random_bf16({2, 67, 40}, 9), random_bf16({2, 67, 23}, 10)}, gemm_attrs(true, false),
                {kBf16Tol}, "weight gradient over [2,67]");
  check_outputs("matmul", {random_bf16({2001, 17}, 11), random_bf16({2001, 31}, 12)}, gemm_attrs(true, false),
                {kBf16Tol}, "weight gradient over 2001 rows");
}

// The LM head's shapes, which bf16_gemm.cpp runs in pieces: k of 16384 or
// more (and 8 times m and n) summed in f32 chunks of 4096, the last one
// partial; a^T with 16384 or more output rows in blocks of 2048, the last one
// partial. Still one rounding per output, so the same tolerance.
TEST(CpuBf16, MatmulMatchesRefWhenSplitIntoPieces) {
  check_outputs("matmul", {random_bf16({5, 20001}, 30), random_bf16({20001, 7}, 31)}, gemm_attrs(false, false),
                {kBf16Tol}, "k = 20001 in chunks");
  check_outputs("matmul", {random_bf16({2, 3, 16411}, 32), random_bf16({9, 16411}, 33)}, gemm_attrs(false, true),
                {kBf16Tol}, "[2,3,16411] x [9,16411]^T in chunks");
  check_outputs("matmul", {random_bf16({17000, 6}, 34), random_bf16({17000, 5}, 35)}, gemm_attrs(true, false),
                {kBf16Tol}, "a^T summed over 17000 rows in chunks");
  check_outputs("matmul", {random_bf16({2, 19, 16411}, 36), random_bf16({2, 19, 5}, 37)}, gemm_attrs(true, false),
                {kBf16Tol}, "16411 output rows of a^T in blocks");
  // Small x, so that the bias is as large as the product and must be there.
  check_outputs("linear", {random_bf16({4, 16400}, 38, 1.0f / 64), random_bf16({16400, 6}, 39), random_bf16({6}, 40)},
                {}, {kBf16Tol}, "linear with bias, k = 16400 in chunks");
}

TEST(CpuBf16, MatmulOfNoInnerTermsIsZero) {
  Tensor out =
      run_on("cpu", "matmul", {random_bf16({3, 0}, 13), random_bf16({0, 4}, 14)}, gemm_attrs(false, false))[0];
  expect_close(out, Tensor::zeros({3, 4}, DType::BF16), 0.0, "K = 0");
}

TEST(CpuBf16, LinearMatchesRefWithBias) {
  check_outputs("linear", {random_bf16({2, 33, 96}, 15), random_bf16({96, 70}, 16), random_bf16({70}, 17)}, {},
                {kBf16Tol}, "linear [2,33,96] x [96,70]");
  check_outputs("linear", {random_bf16({1, 5}, 18), random_bf16({5, 3}, 19), random_bf16({3}, 20)}, {}, {kBf16Tol},
                "linear one row");
  check_outputs("linear", {random_bf16({67, 384}, 21), random_bf16({384, 1152}, 22), random_bf16({1152}, 23)}, {},
                {kBf16Tol}, "linear c_attn-like");
}

// ---- element-wise and reductions ---------------------------------------------

TEST(CpuBf16, AddScaleGeluMatchRef) {
  Tensor a = random_bf16({3, 5, 77}, 1);
  check_outputs("add", {a, random_bf16({3, 5, 77}, 2)}, {}, {kBf16Tol}, "add same shape");
  check_outputs("add", {a, random_bf16({5, 77}, 3)}, {}, {kBf16Tol}, "add [5, 77]");
  check_outputs("add", {a, random_bf16({}, 4)}, {}, {kBf16Tol}, "add scalar");
  check_outputs("add", {random_bf16({4, 10000}, 5), random_bf16({10000}, 6)}, {}, {kBf16Tol}, "add chunked");
  check_outputs("scale", {random_bf16({1, 33333}, 7)}, {{"factor", -0.37}}, {kBf16Tol}, "scale");
  for (float scale : {1.0f, 4.0f}) {
    Tensor x = random_bf16({3, 11111}, 8, scale);
    check_outputs("gelu", {x}, {}, {kBf16Tol}, "gelu");
    check_outputs("gelu_backward", {random_bf16({3, 11111}, 9), x}, {}, {kBf16Tol}, "gelu_backward");
  }
}

TEST(CpuBf16, AddAndScaleMayWriteOverTheirInput) {
  expect_add_and_scale_in_place(random_bf16({2, 3000, 7}, 10), random_bf16({7}, 11), 0.3, "bf16");
}

TEST(CpuBf16, ReductionsMatchRef) {
  check_outputs("sum_to", {random_bf16({2048, 384}, 12)}, {{"shape", std::vector<int64_t>{384}}}, {kBf16Tol},
                "sum_to bias gradient");
  check_outputs("sum_to", {random_bf16({3, 4500}, 13)}, {{"shape", std::vector<int64_t>{4500}}}, {kBf16Tol},
                "sum_to wide");
  check_outputs("sum_to", {random_bf16({4, 3, 5}, 14)}, {{"shape", std::vector<int64_t>{}}}, {kBf16Tol},
                "sum_to scalar");
  check_outputs("sum_squares", {random_bf16({100003}, 15)}, {}, {1e-6}, "sum_squares (f32 result)");
}

// ---- cross-entropy ------------------------------------------------------------

TEST(CpuBf16, CrossEntropyMatchesRef) {
  struct Case {
    int64_t rows, vocab;
    float scale;
  };
  // Vocabularies that are not multiples of a vector or chunk, and peaked rows.
  for (Case c : {Case{7, 4099, 1.0f}, Case{33, 50257, 3.0f}, Case{1, 5, 1.0f}}) {
    std::string what = "cross_entropy " + std::to_string(c.rows) + "x" + std::to_string(c.vocab);
    Tensor logits = random_bf16({c.rows, c.vocab}, 16, c.scale);
    Tensor targets = random_indices({c.rows}, 17, c.vocab);
    Tensors forward = check_outputs("cross_entropy", {logits, targets}, {}, {2e-6, 2e-6}, what);
    Tensor dloss = Tensor::zeros({}, DType::F32);
    dloss.data<float>()[0] = 1.5f;
    check_outputs("cross_entropy_backward", {dloss, logits, targets, forward[1]}, {}, {kBf16Tol}, what + " backward");
  }
}

// ---- attention ------------------------------------------------------------------

// Where the CPU has bf16 dot products (and the head size is even) attention
// rounds the probabilities P, and its backward also dS, to bf16 before the
// products with V, dO, Q and K, as FlashAttention does: each term of a sum
// such as dV_j = sum_i P_ij dO_i then moves by up to 2^-9 of itself, so the
// sum by up to 2^-9 sum_i |P_ij dO_i|, which exceeds one ulp of |dV_j| + rms
// where the terms cancel (rows of dS sum to 0, so dQ always cancels). An f64
// emulation of these cases over four seeds each (rounding P, dS and the
// outputs) gave at worst 1.3 bf16 ulps of |expected| + rms for out and 4.1
// for dqkv (dQ, peaked softmax): allow 2 and 6.
double rounded_probs_tol(int64_t head_dim, double ulps) {
  return cpu::has_bf16_dot() && head_dim % 2 == 0 ? ulps * kBf16Tol : kBf16Tol;
}

struct AttentionCase {
  int64_t batch, seq, heads, head_dim;
  float scale;
};

TEST(CpuBf16, AttentionForwardAndBackwardMatchRef) {
  // T not a multiple of the 64-query tile, head sizes 64 and 80 (and one that
  // is not a multiple of 16), peaked softmaxes (scale 3); an odd head size
  // runs the widening path even where the CPU has bf16 dot products.
  const AttentionCase cases[] = {
      {2, 67, 3, 64, 1.0f}, {1, 130, 2, 80, 1.0f}, {2, 129, 2, 64, 3.0f},
      {1, 5, 4, 24, 3.0f},  {3, 1, 2, 80, 1.0f},   {2, 70, 2, 7, 1.0f},
  };
  for_each_bf16_attention_path([&](const std::string& path) {
    for (const AttentionCase& c : cases) {
      std::string what = "attention B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) +
                         " H=" + std::to_string(c.heads) + " D=" + std::to_string(c.head_dim) + " on " + path;
      int64_t width = c.heads * c.head_dim;
      Attrs attrs{{"n_head", c.heads}};
      Tensor qkv = random_bf16({c.batch, c.seq, 3 * width}, 100 + c.seq, c.scale);
      check_outputs("attention", {qkv}, attrs, {rounded_probs_tol(c.head_dim, 2), 3e-5}, what);
      Tensors forward = run_on("ref", "attention", {qkv}, attrs);
      Tensor dout = random_bf16({c.batch, c.seq, width}, 300 + c.seq);
      check_outputs("attention_backward", {dout, qkv, forward[0], forward[1]}, attrs,
                    {rounded_probs_tol(c.head_dim, 6)}, what + " backward");
    }
  });
}

TEST(CpuBf16, CachedAttentionMatchesRef) {
  Attrs attrs{{"n_head", int64_t{2}}, {"position", int64_t{70}}};
  check_outputs("attention_cached", {random_bf16({2, 3, 160}, 1), random_bf16({2, 80, 160}, 2),
                                     random_bf16({2, 80, 160}, 3)},
                attrs, {kBf16Tol}, "attention_cached D=80");
}

}  // namespace
}  // namespace strata::testing
