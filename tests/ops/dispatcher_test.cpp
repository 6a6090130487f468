// How a Dispatcher routes ops of a backend that lacks kernels: decomposition
// first, then the `ref` kernel, each counted per (op, dtype, shape), or an
// error under FallbackPolicy::Error.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

// A backend holding `ref`'s f32 kernels for just `ops`.
std::unique_ptr<Backend> partial_backend(const std::string& name, const std::vector<std::string>& ops) {
  auto backend = std::make_unique<Backend>(name);
  for (const std::string& op : ops) backend->add_kernel(op, DType::F32, *get_backend("ref").find(op, DType::F32));
  return backend;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct LinearInputs {
  Tensor x = random_tensor({2, 3, 4}, 1, 1.0, DType::F32);
  Tensor w = random_tensor({4, 5}, 2, 1.0, DType::F32);
  Tensor bias = random_tensor({5}, 3, 1.0, DType::F32);
};

TEST(Dispatcher, LinearWithoutKernelRunsItsDecompositionAndIsRecorded) {
  auto backend = partial_backend("gemm_only", {"matmul", "add"});
  Dispatcher dispatcher(*backend, get_backend("ref"), FallbackPolicy::Allow);
  LinearInputs in;
  Tensor y = dispatcher.call("linear", {in.x, in.w, in.bias})[0];
  dispatcher.call("linear", {in.x, in.w, in.bias});
  // The decomposition rounds the product to f32 before adding the bias: one f32 rounding apart.
  expect_all_near(y, values_of(run_ref("linear", {in.x, in.w, in.bias})[0]), 1e-6, 1e-6, "decomposed linear");

  std::vector<FallbackRecord> records = dispatcher.records();
  ASSERT_EQ(records.size(), 1u);  // matmul and add ran natively
  EXPECT_EQ(records[0].op, "linear");
  EXPECT_EQ(records[0].dtype, DType::F32);
  EXPECT_EQ(records[0].shape, "[2, 3, 4]");
  EXPECT_EQ(records[0].route, Route::Decomposed);
  EXPECT_EQ(records[0].count, 2);
}

TEST(Dispatcher, OpWithoutKernelOrDecompositionFallsBackToRef) {
  auto backend = partial_backend("adds_only", {"add"});
  Dispatcher dispatcher(*backend, get_backend("ref"), FallbackPolicy::Allow);
  Tensor x = random_tensor({3, 4}, 1, 1.0, DType::F32);
  Tensor y = dispatcher.call("gelu", {x})[0];
  expect_all_near(y, values_of(run_ref("gelu", {x})[0]), 0, 0, "gelu via ref");

  std::vector<FallbackRecord> records = dispatcher.records();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].op, "gelu");
  EXPECT_EQ(records[0].dtype, DType::F32);
  EXPECT_EQ(records[0].shape, "[3, 4]");
  EXPECT_EQ(records[0].route, Route::Reference);
  EXPECT_EQ(records[0].count, 1);
}

TEST(Dispatcher, DecompositionStepsThemselvesFallBack) {
  auto backend = partial_backend("adds_only", {"add"});
  Dispatcher dispatcher(*backend, get_backend("ref"), FallbackPolicy::Warn);
  LinearInputs in;
  dispatcher.call("linear", {in.x, in.w, in.bias});
  std::vector<FallbackRecord> records = dispatcher.records();  // sorted by op
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].op, "linear");
  EXPECT_EQ(records[0].route, Route::Decomposed);
  EXPECT_EQ(records[1].op, "matmul");
  EXPECT_EQ(records[1].route, Route::Reference);
  EXPECT_EQ(records[1].shape, "[2, 3, 4]");
  EXPECT_EQ(records[1].count, 1);
}

TEST(Dispatcher, SummaryListsEveryNonNativeRoute) {
  auto backend = partial_backend("gemm_only", {"matmul", "add"});
  Dispatcher dispatcher(*backend, get_backend("ref"), FallbackPolicy::Allow);
  LinearInputs in;
  dispatcher.call("add", {in.x.reshape({6, 4}), random_tensor({4}, 4, 1.0, DType::F32)});
  EXPECT_EQ(dispatcher.summary(), "");  // everything so far native
  dispatcher.call("linear", {in.x, in.w, in.bias});
  for (int i = 0; i < 3; ++i) dispatcher.call("gelu", {in.x});
  std::string summary = dispatcher.summary();
  EXPECT_TRUE(contains(summary, "gemm_only")) << summary;
  EXPECT_TRUE(contains(summary, "linear")) << summary;
  EXPECT_TRUE(contains(summary, "decomposed")) << summary;
  EXPECT_TRUE(contains(summary, "gelu")) << summary;
  EXPECT_TRUE(contains(summary, "ref-fallback")) << summary;
  EXPECT_TRUE(contains(summary, "[2, 3, 4]")) << summary;
  EXPECT_FALSE(contains(summary, "matmul")) << summary;
}

TEST(Dispatcher, ErrorPolicyRefusesDecompositionAndFallbackNamingTheOp) {
  auto backend = partial_backend("gemm_only", {"matmul", "add"});
  Dispatcher dispatcher(*backend, get_backend("ref"), FallbackPolicy::Error);
  LinearInputs in;
  dispatcher.call("matmul", {in.x, in.w}, {{"trans_a", false}, {"trans_b", false}});  // native: fine
  try {
    dispatcher.call("linear", {in.x, in.w, in.bias});
    FAIL() << "linear was decomposed under FallbackPolicy::Error";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "'linear'")) << error.what();
    EXPECT_TRUE(contains(error.what(), "gemm_only")) << error.what();
  }
  try {
    dispatcher.call("gelu", {in.x});
    FAIL() << "gelu fell back to ref under FallbackPolicy::Error";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "'gelu'")) << error.what();
  }
  EXPECT_TRUE(dispatcher.records().empty());
}

TEST(Dispatcher, NoKernelAnywhereIsAnErrorNamingTheOp) {
  Backend empty("empty"), also_empty("also_empty");
  Dispatcher dispatcher(empty, also_empty, FallbackPolicy::Allow);
  try {
    dispatcher.call("gelu", {random_tensor({2}, 1)});
    FAIL() << "gelu ran without any kernel";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "'gelu'")) << error.what();
    EXPECT_TRUE(contains(error.what(), "f64")) << error.what();
  }
}

}  // namespace
}  // namespace strata::testing
