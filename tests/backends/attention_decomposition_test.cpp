// A backend without the fused attention kernels runs attention,
// grouped_attention and their backwards through their decompositions
// (split_heads, bmm, causal_softmax, causal_softmax_backward, merge_heads):
// the dispatcher must record that route, and the results must match the fused
// `ref` kernels on the same inputs. Shapes: T not a multiple of any tile (37,
// 19, 1), head sizes 64 and 80, several heads, batch 2; grouped with one kv
// head for all query heads and with two query heads per kv head.
//
// Tolerances (relative to |expected| + rms, see expect_close): f64 agrees to
// rounding (measured 5e-15, 1e-12 allowed). f32 rounds every intermediate
// (scores, probabilities) once and the cpu parts use an exp with 2e-7 relative
// error: measured worst 1.0e-6 forward and 1.6e-6 backward, 1e-5 and 2e-5
// allowed. bf16 rounds the scores, probabilities and their gradients to 8 bits
// each (dS = P (dP - rowsum) cancels after dP was rounded) while the fused
// kernel rounds only its outputs: measured worst 8.3e-3 forward (lse 1.5e-3)
// and 2.9e-2 backward, 3e-2 and 6e-2 allowed.
#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

// `source`'s kernels minus the fused attention ones.
Backend without_fused_attention(const std::string& source) {
  const Backend& from = get_backend(source);
  Backend result(source + "-unfused");
  for (const auto& [op, dtype] : from.kernels()) {
    if (op == "attention" || op == "attention_backward" || op == "grouped_attention" ||
        op == "grouped_attention_backward") {
      continue;
    }
    result.add_kernel(op, dtype, *from.find(op, dtype));
  }
  return result;
}

struct Case {
  int64_t batch, seq, heads, head_dim;
};

const Case kCases[] = {{2, 37, 3, 64}, {2, 19, 2, 80}, {2, 1, 2, 8}};

struct Tolerance {
  double forward, backward;
};

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::F64: return {1e-12, 1e-12};
    case DType::F32: return {1e-5, 2e-5};
    default: return {3e-2, 6e-2};
  }
}

bool recorded(const Dispatcher& dispatcher, const std::string& op, DType dtype, Route route) {
  for (const FallbackRecord& record : dispatcher.records()) {
    if (record.op == op && record.dtype == dtype && record.route == route) return true;
  }
  return false;
}

void check_decomposition(const std::string& source, DType dtype) {
  Backend unfused = without_fused_attention(source);
  Dispatcher dispatcher(unfused, get_backend("ref"), FallbackPolicy::Allow);
  Tolerance tol = tolerance_for(dtype);
  for (const Case& c : kCases) {
    std::string what = source + " without fused attention, " + std::string(dtype_name(dtype)) +
                       ", B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) +
                       " H=" + std::to_string(c.heads) + " D=" + std::to_string(c.head_dim);
    int64_t width = c.heads * c.head_dim;
    Tensor qkv = random_f32({c.batch, c.seq, 3 * width}, 10 + c.seq).to(dtype);
    Tensor dout = random_f32({c.batch, c.seq, width}, 20 + c.seq).to(dtype);
    Attrs attrs{{"n_head", c.heads}};

    Tensors fused = run_on("ref", "attention", {qkv}, attrs);
    Tensors decomposed = dispatcher.call("attention", {qkv}, attrs);
    expect_close(decomposed[0], fused[0], tol.forward, what + ": out");
    expect_close(decomposed[1], fused[1], tol.forward, what + ": lse");

    Tensors backward_inputs{dout, qkv, fused[0], fused[1]};
    Tensor fused_dqkv = run_on("ref", "attention_backward", backward_inputs, attrs)[0];
    Tensor decomposed_dqkv = dispatcher.call("attention_backward", backward_inputs, attrs)[0];
    expect_close(decomposed_dqkv, fused_dqkv, tol.backward, what + ": dqkv");
  }
  EXPECT_TRUE(recorded(dispatcher, "attention", dtype, Route::Decomposed)) << dispatcher.summary();
  EXPECT_TRUE(recorded(dispatcher, "attention_backward", dtype, Route::Decomposed)) << dispatcher.summary();
}

struct GroupedCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
};

const GroupedCase kGroupedCases[] = {{2, 37, 4, 1, 64}, {2, 19, 4, 2, 80}, {2, 1, 2, 1, 8}};

void check_grouped_decomposition(const std::string& source, DType dtype) {
  Backend unfused = without_fused_attention(source);
  Dispatcher dispatcher(unfused, get_backend("ref"), FallbackPolicy::Allow);
  Tolerance tol = tolerance_for(dtype);
  for (const GroupedCase& c : kGroupedCases) {
    std::string what = source + " without fused grouped attention, " + std::string(dtype_name(dtype)) +
                       ", B=" + std::to_string(c.batch) + " T=" + std::to_string(c.seq) +
                       " H=" + std::to_string(c.heads) + " KV=" + std::to_string(c.kv_heads) +
                       " D=" + std::to_string(c.head_dim);
    Tensor q = random_f32({c.batch, c.seq, c.heads * c.head_dim}, 30 + c.seq).to(dtype);
    Tensor k = random_f32({c.batch, c.seq, c.kv_heads * c.head_dim}, 40 + c.seq).to(dtype);
    Tensor v = random_f32({c.batch, c.seq, c.kv_heads * c.head_dim}, 50 + c.seq).to(dtype);
    Tensor dout = random_f32(q.shape(), 60 + c.seq).to(dtype);
    Attrs attrs{{"n_head", c.heads}, {"n_kv_head", c.kv_heads}};

    Tensors fused = run_on("ref", "grouped_attention", {q, k, v}, attrs);
    Tensors decomposed = dispatcher.call("grouped_attention", {q, k, v}, attrs);
    expect_close(decomposed[0], fused[0], tol.forward, what + ": out");
    expect_close(decomposed[1], fused[1], tol.forward, what + ": lse");

    Tensors backward_inputs{dout, q, k, v, fused[0], fused[1]};
    Tensors fused_grads = run_on("ref", "grouped_attention_backward", backward_inputs, attrs);
    Tensors decomposed_grads = dispatcher.call("grouped_attention_backward", backward_inputs, attrs);
    for (size_t i = 0; i < 3; ++i) {
      expect_close(decomposed_grads[i], fused_grads[i], tol.backward, what + ": gradient " + std::to_string(i));
    }
  }
  EXPECT_TRUE(recorded(dispatcher, "grouped_attention", dtype, Route::Decomposed)) << dispatcher.summary();
  EXPECT_TRUE(recorded(dispatcher, "grouped_attention_backward", dtype, Route::Decomposed)) << dispatcher.summary();
}

TEST(AttentionDecomposition, RefWithoutFusedKernelsF64) { check_decomposition("ref", DType::F64); }
TEST(AttentionDecomposition, RefWithoutFusedKernelsF32) { check_decomposition("ref", DType::F32); }
TEST(AttentionDecomposition, RefWithoutFusedKernelsBF16) { check_decomposition("ref", DType::BF16); }

// f32 runs the cpu parts natively; bf16 takes them from ref.
TEST(AttentionDecomposition, CpuWithoutFusedKernelsF32) { check_decomposition("cpu", DType::F32); }
TEST(AttentionDecomposition, CpuWithoutFusedKernelsBF16) { check_decomposition("cpu", DType::BF16); }

TEST(AttentionDecomposition, GroupedRefWithoutFusedKernelsF64) { check_grouped_decomposition("ref", DType::F64); }
TEST(AttentionDecomposition, GroupedRefWithoutFusedKernelsBF16) { check_grouped_decomposition("ref", DType::BF16); }
TEST(AttentionDecomposition, GroupedCpuWithoutFusedKernelsF32) { check_grouped_decomposition("cpu", DType::F32); }

TEST(AttentionDecomposition, CpuRunsTheF32PartsNatively) {
  Backend unfused = without_fused_attention("cpu");
  Dispatcher dispatcher(unfused, get_backend("ref"), FallbackPolicy::Allow);
  Tensor qkv = random_f32({2, 9, 3 * 16}, 3);
  dispatcher.call("attention", {qkv}, {{"n_head", 2}});
  std::vector<FallbackRecord> records = dispatcher.records();
  ASSERT_EQ(records.size(), 1u) << dispatcher.summary();
  EXPECT_EQ(records[0].op, "attention");
  EXPECT_EQ(records[0].route, Route::Decomposed);
}

// A backend with no kernels at all sends every part to ref, so the records
// list exactly the ops each decomposition runs: they must be the ones the
// schema declares (the coverage report prints that list).
TEST(AttentionDecomposition, DeclaredPartsAreTheOpsRun) {
  Backend empty("empty");
  Tensor qkv = random_f32({2, 5, 3 * 8}, 4);
  Tensor dout = random_f32({2, 5, 8}, 5);
  Attrs attrs{{"n_head", 2}};
  Tensors forward = run_on("ref", "attention", {qkv}, attrs);
  struct Call {
    std::string op;
    Tensors inputs;
    Attrs attrs;
  };
  Tensor q = random_f32({2, 5, 16}, 6), kv = random_f32({2, 5, 4}, 7);
  Attrs grouped_attrs{{"n_head", 4}, {"n_kv_head", 1}};
  Tensors grouped = run_on("ref", "grouped_attention", {q, kv, kv}, grouped_attrs);
  for (const Call& call : {Call{"attention", {qkv}, attrs},
                           Call{"attention_backward", {dout, qkv, forward[0], forward[1]}, attrs},
                           Call{"grouped_attention", {q, kv, kv}, grouped_attrs},
                           Call{"grouped_attention_backward", {q, q, kv, kv, grouped[0], grouped[1]}, grouped_attrs}}) {
    Dispatcher dispatcher(empty, get_backend("ref"), FallbackPolicy::Allow);
    dispatcher.call(call.op, call.inputs, call.attrs);
    std::set<std::string> ran;
    for (const FallbackRecord& record : dispatcher.records()) {
      if (record.op != call.op) {
        EXPECT_EQ(record.route, Route::Reference) << record.op;
        ran.insert(record.op);
      }
    }
    const std::vector<std::string>& declared = OpRegistry::global().get(call.op).decomposes_into;
    EXPECT_EQ(ran, std::set<std::string>(declared.begin(), declared.end())) << call.op;
  }
}

}  // namespace
}  // namespace strata::testing
