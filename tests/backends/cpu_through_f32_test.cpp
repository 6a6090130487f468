// The cpu backend's f16 kernels, and its bf16 kernels for ops without a
// native bf16 path (layernorm, embedding), which widen to f32, run the f32
// kernel and round each output once. Against ref on the same narrow inputs;
// as in cpu_bf16_test.cpp, an output may land one ulp of its dtype apart from
// ref's where its exact value lies near a rounding boundary: one f16 ulp is at
// most 2^-10 of the value, so f16 outputs are allowed 2^-10 of |expected| +
// rms, bf16 ones 2^-7; f32 outputs (statistics) keep f32 tolerances.
#include <algorithm>
#include <memory>

#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

constexpr double kF16Tol = 1.0 / 1024;
constexpr double kBf16Tol = 1.0 / 128;

Tensor random_of(DType dtype, const Shape& shape, uint64_t seed, float scale = 1.0f) {
  return random_f32(shape, seed, scale).to(dtype);
}

// These kernels are correct but not native arithmetic: the dispatcher must
// report them (Route::Emulated), so this runs them under FallbackPolicy::Allow
// and checks the record.
Dispatcher& emulating_dispatcher() {
  static std::unique_ptr<Dispatcher> cpu = make_dispatcher("cpu", FallbackPolicy::Allow);
  return *cpu;
}

void expect_recorded_as_emulated(const std::string& op, DType dtype) {
  std::vector<FallbackRecord> records = emulating_dispatcher().records();
  bool found = std::any_of(records.begin(), records.end(), [&](const FallbackRecord& record) {
    return record.op == op && record.dtype == dtype && record.route == Route::Emulated;
  });
  EXPECT_TRUE(found) << op << " " << dtype_name(dtype) << " was not recorded as emulated";
}

void check_outputs(const std::string& op, const Tensors& inputs, const Attrs& attrs, const std::vector<double>& tols,
                   const std::string& what) {
  Tensors cpu = emulating_dispatcher().call(op, inputs, attrs);
  Tensors ref = run_on("ref", op, inputs, attrs);
  Tensors again = emulating_dispatcher().call(op, inputs, attrs);
  expect_recorded_as_emulated(op, inputs.at(OpRegistry::global().get(op).dtype_input).dtype());
  for (size_t i = 0; i < cpu.size(); ++i) {
    std::string label = what + " output " + std::to_string(i);
    EXPECT_EQ(cpu[i].dtype(), ref[i].dtype()) << label;
    expect_close(cpu[i], ref[i], tols.at(i), label);
    expect_identical(cpu[i], again[i], label);
  }
}

TEST(CpuThroughF32, F16MatmulLinearAndElementwiseMatchRef) {
  const DType h = DType::F16;
  check_outputs("matmul", {random_of(h, {3, 5, 37}, 1), random_of(h, {37, 29}, 2)},
                {{"trans_a", false}, {"trans_b", false}}, {kF16Tol}, "f16 matmul");
  check_outputs("matmul", {random_of(h, {67, 40}, 3), random_of(h, {67, 23}, 4)},
                {{"trans_a", true}, {"trans_b", false}}, {kF16Tol}, "f16 weight gradient");
  check_outputs("linear", {random_of(h, {2, 33, 96}, 5), random_of(h, {96, 70}, 6), random_of(h, {70}, 7)}, {},
                {kF16Tol}, "f16 linear");
  check_outputs("add", {random_of(h, {4, 10000}, 8), random_of(h, {10000}, 9)}, {}, {kF16Tol}, "f16 add");
  Tensor x = random_of(h, {3, 11111}, 10, 4.0f);
  check_outputs("gelu", {x}, {}, {kF16Tol}, "f16 gelu");
  check_outputs("gelu_backward", {random_of(h, {3, 11111}, 11), x}, {}, {kF16Tol}, "f16 gelu_backward");
  check_outputs("sum_to", {random_of(h, {2048, 384}, 12)}, {{"shape", std::vector<int64_t>{384}}}, {kF16Tol},
                "f16 sum_to");
}

TEST(CpuThroughF32, F16AddMayWriteOverItsInput) {
  Tensor a = random_of(DType::F16, {2, 3000, 7}, 13), b = random_of(DType::F16, {7}, 14);
  Tensor expected = emulating_dispatcher().call("add", {a, b})[0];
  Tensor in_place = a.clone();
  emulating_dispatcher().run("add", {in_place, b}, {in_place});
  expect_identical(in_place, expected, "f16 add in place");
}

TEST(CpuThroughF32, F16AttentionAndCrossEntropyMatchRef) {
  Attrs attrs{{"n_head", 2}};
  Tensor qkv = random_of(DType::F16, {2, 67, 3 * 2 * 80}, 15);
  check_outputs("attention", {qkv}, attrs, {kF16Tol, 3e-5}, "f16 attention D=80");
  Tensors forward = run_on("ref", "attention", {qkv}, attrs);
  check_outputs("attention_backward", {random_of(DType::F16, {2, 67, 160}, 16), qkv, forward[0], forward[1]}, attrs,
                {kF16Tol}, "f16 attention_backward");
  Tensor logits = random_of(DType::F16, {7, 4099}, 17, 3.0f);
  Tensor targets = random_indices({7}, 18, 4099);
  Tensors loss = run_on("ref", "cross_entropy", {logits, targets});
  check_outputs("cross_entropy", {logits, targets}, {}, {2e-6, 2e-6}, "f16 cross_entropy");
  Tensor dloss = Tensor::zeros({}, DType::F32);
  dloss.data<float>()[0] = 1.0f;
  check_outputs("cross_entropy_backward", {dloss, logits, targets, loss[1]}, {}, {kF16Tol},
                "f16 cross_entropy_backward");
}

TEST(CpuThroughF32, Bf16LayernormAndEmbeddingMatchRef) {
  const DType b = DType::BF16;
  Tensor x = random_of(b, {2, 33, 77}, 19, 2.0f);
  Tensor gamma = random_of(b, {77}, 20), beta = random_of(b, {77}, 21);
  Attrs attrs{{"eps", 1e-5}};
  check_outputs("layernorm", {x, gamma, beta}, attrs, {kBf16Tol, 2e-6, 2e-6}, "bf16 layernorm");
  Tensors forward = run_on("ref", "layernorm", {x, gamma, beta}, attrs);
  check_outputs("layernorm_backward", {random_of(b, {2, 33, 77}, 22), x, gamma, forward[1], forward[2]}, {},
                {kBf16Tol, kBf16Tol, kBf16Tol}, "bf16 layernorm_backward");
  Tensor ids = random_indices({3, 50}, 23, 101);
  check_outputs("embedding", {random_of(b, {101, 48}, 24), ids}, {}, {0.0}, "bf16 embedding");
  check_outputs("embedding_backward", {random_of(b, {3, 50, 48}, 25), ids}, {{"num_embeddings", int64_t{101}}},
                {kBf16Tol}, "bf16 embedding_backward");
}

}  // namespace
}  // namespace strata::testing
