// `strata compare`'s parts against independent figures, and whole comparisons of a tiny GPT-2:
// ref against cpu, a backend whose gelu is deliberately perturbed, f32 against bf16, fused against
// unfused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/backends.h"
#include "compare/compare_runs.h"
#include "compare/metrics.h"
#include "compare/tolerance.h"
#include "support/error_text.h"
#include "support/test_files.h"
#include "support/tiny_compare_config.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;

Tensor tensor_of(const std::vector<double>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::F64);
  std::copy(values.begin(), values.end(), t.data<double>());
  return t;
}

TEST(CompareMetrics, MatchHandComputedFigures) {
  const std::vector<double> a{1, -2, 0, 4}, b{1.002, -2, 1e-6, 4};
  const TensorMetrics m = compare_tensors(tensor_of(a), tensor_of(b));
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i], na += a[i] * a[i], nb += b[i] * b[i];
  EXPECT_NEAR(m.cosine, dot / std::sqrt(na * nb), 1e-15);
  EXPECT_NEAR(m.max_abs, 0.002, 1e-15);
  EXPECT_NEAR(m.max_rel, 1e-6 / kRelativeEpsilon, 1e-3);  // the zero of a divides by the epsilon
  EXPECT_NEAR(m.rmse, std::sqrt((0.002 * 0.002 + 1e-12) / 4), 1e-15);
  EXPECT_DOUBLE_EQ(m.within_1e3, 0.5);  // -2 and 4 exact; 1.002 is 2e-3 off, the zero infinitely
  EXPECT_DOUBLE_EQ(m.scale, 4);
  EXPECT_EQ(m.nonfinite_mismatches, 0);
}

TEST(CompareMetrics, EdgeCases) {
  EXPECT_TRUE(std::isnan(compare_tensors(tensor_of({3}), tensor_of({3})).cosine));  // one element: no cosine
  EXPECT_DOUBLE_EQ(compare_tensors(tensor_of({0, 0}), tensor_of({0, 0})).cosine, 1);
  EXPECT_DOUBLE_EQ(compare_tensors(tensor_of({0, 0}), tensor_of({1, 0})).cosine, 0);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(compare_tensors(tensor_of({inf, 1}), tensor_of({inf, 1})).nonfinite_mismatches, 0);
  EXPECT_EQ(compare_tensors(tensor_of({inf, 1, 2}), tensor_of({nan, 1, inf})).nonfinite_mismatches, 2);
  // Factors scale each side before comparing (the backward seed divided out).
  EXPECT_DOUBLE_EQ(compare_tensors(tensor_of({1, 2}), tensor_of({4, 8}), 1, 0.25).max_abs, 0);
}

ToleranceTable table_from(const std::string& text) {
  ToleranceTable table;
  table.apply(TomlReader::parse(text, "t.toml").table("compare", false));
  return table;
}

TEST(CompareTolerances, GroupsByOpAndNarrowerDtypeAndOverridesInherit) {
  EXPECT_EQ(judged_dtype(DType::F32, DType::BF16), DType::BF16);
  EXPECT_EQ(judged_dtype(DType::F64, DType::F32), DType::F32);
  EXPECT_EQ(judged_dtype(DType::F16, DType::BF16), DType::BF16);
  const ToleranceTable defaults;
  EXPECT_EQ(defaults.lookup("matmul", DType::F32).name, "f32");
  EXPECT_EQ(defaults.lookup("step_param", DType::F32).name, "f32.step_param");
  const ToleranceTable table = table_from("[compare.bf16]\nrtol = 0.2\n[compare.bf16.matmul]\nmin_cosine = 0.995\n");
  const ToleranceTable::Group matmul = table.lookup("matmul", DType::BF16);
  EXPECT_EQ(matmul.name, "bf16.matmul");
  EXPECT_DOUBLE_EQ(matmul.tolerance.min_cosine, 0.995);
  EXPECT_DOUBLE_EQ(matmul.tolerance.rtol, 0.2);
  EXPECT_DOUBLE_EQ(matmul.tolerance.atol, defaults.lookup("gelu", DType::BF16).tolerance.atol);
  EXPECT_DOUBLE_EQ(table.lookup("gelu", DType::BF16).tolerance.rtol, 0.2);
  EXPECT_EQ(table.lookup("gelu", DType::F32).tolerance.rtol, defaults.lookup("gelu", DType::F32).tolerance.rtol);
}

// A parameter after steps in bf16 or f16 is judged against how far AdamW can have moved the two runs apart,
// and nothing else; f32's own group and a configured one stand.
TEST(CompareTolerances, LowPrecisionParametersAfterStepsAreJudgedAgainstAdamwsReach) {
  const ToleranceTable defaults;
  const ToleranceTable::Group bf16 = defaults.lookup("step_param", DType::BF16, 3e-3);
  EXPECT_EQ(bf16.name, "bf16.step_param");
  EXPECT_DOUBLE_EQ(bf16.tolerance.atol, defaults.lookup("gelu", DType::BF16).tolerance.atol + 3e-3);
  EXPECT_DOUBLE_EQ(bf16.tolerance.update_reach, 3e-3);
  EXPECT_DOUBLE_EQ(bf16.tolerance.rtol, 0);
  TensorMetrics noise{.count = 8, .cosine = -0.9, .max_abs = 1.5e-3, .scale = 2e-3};  // updates of either sign
  EXPECT_TRUE(bf16.tolerance.passes(noise));
  EXPECT_NEAR(bf16.tolerance.margin(noise), 1.5e-3 / bf16.tolerance.atol, 1e-12);  // the cosine adds nothing
  noise.max_abs = 2.9e-3;
  EXPECT_TRUE(bf16.tolerance.passes(noise));
  noise.max_abs = 3.1e-3;
  EXPECT_FALSE(bf16.tolerance.passes(noise));
  EXPECT_EQ(defaults.lookup("step_param", DType::F16, 3e-3).name, "f16.step_param");
  EXPECT_DOUBLE_EQ(defaults.lookup("step_param", DType::F32, 3e-3).tolerance.atol,
                   defaults.lookup("step_param", DType::F32).tolerance.atol);
  const ToleranceTable configured = table_from("[compare.bf16.step_param]\nrtol = 0.5\n");
  EXPECT_DOUBLE_EQ(configured.lookup("step_param", DType::BF16, 3e-3).tolerance.update_reach, 0);
  EXPECT_DOUBLE_EQ(configured.lookup("step_param", DType::BF16, 3e-3).tolerance.rtol, 0.5);
}

TEST(CompareTolerances, UnknownKeysAndBadValuesAreErrorsNamingThem) {
  EXPECT_THAT(error_of([] { table_from("[compare.f8]\nrtol = 1\n"); }), HasSubstr("unknown key 'compare.f8'"));
  EXPECT_THAT(error_of([] { table_from("[compare.f32.gemm]\nrtol = 1\n"); }), HasSubstr("unknown key 'compare.f32.gemm'"));
  EXPECT_THAT(error_of([] { table_from("[compare.f32.matmul]\nrtool = 1\n"); }),
              HasSubstr("unknown key 'compare.f32.matmul.rtool'"));
  EXPECT_THAT(error_of([] { table_from("[compare.f32]\nrtol = -1\n"); }), HasSubstr("key 'compare.f32.rtol'"));
  EXPECT_THAT(error_of([] { table_from("[compare.f32]\nmin_cosine = 2\n"); }), HasSubstr("key 'compare.f32.min_cosine'"));
}

TEST(CompareTolerances, PassAndMargin) {
  const Tolerance tolerance{.min_cosine = 0.99, .rtol = 0.01, .atol = 0};
  TensorMetrics m{.count = 4, .cosine = 0.995, .max_abs = 0.05, .scale = 10};
  EXPECT_TRUE(tolerance.passes(m));
  EXPECT_DOUBLE_EQ(tolerance.margin(m), 0.5);
  m.max_abs = 0.2;
  EXPECT_FALSE(tolerance.passes(m));
  m.max_abs = 0;
  m.nonfinite_mismatches = 1;
  EXPECT_FALSE(tolerance.passes(m));
}

CapturedTensor captured(const std::string& name, std::vector<double> values, std::vector<std::string> inputs) {
  return {name, "op", DType::F32, DType::F32, tensor_of(values), 1.0, std::move(inputs)};
}

// The blame reads through a tensor only the candidate has (a cast) to the nearest compared one, and
// skips a failing tensor whose input fails.
TEST(CompareFirstDivergence, BlamesTheEarliestFailureWhoseInputsPass) {
  Comparator comparator{ToleranceTable(), true};
  comparator.add_baseline(captured("x", {1, 2}, {}));
  comparator.add_baseline(captured("y", {3, 4}, {}));
  comparator.add_baseline(captured("z", {5, 6}, {}));
  comparator.add_candidate(captured("x", {1, 2}, {"weight"}));
  comparator.add_candidate(captured("x.cast", {1, 2}, {"x"}));
  comparator.add_candidate(captured("y", {3, 5}, {"x.cast"}));
  comparator.add_candidate(captured("z", {5, 7}, {"y", "weight"}));
  const Comparison comparison = std::move(comparator).finish();
  ASSERT_TRUE(comparison.failed());
  ASSERT_TRUE(comparison.first_divergence);
  std::vector<std::string> statuses;
  for (const ComparedTensor& t : comparison.tensors) statuses.push_back(t.name + " " + std::string(status_name(t.status)));
  EXPECT_THAT(statuses, ElementsAre("x pass", "x.cast only b", "y FAIL", "z FAIL"));
  EXPECT_EQ(comparison.tensors[comparison.first_divergence->tensor].name, "y");
  ASSERT_EQ(comparison.first_divergence->inputs.size(), 1u);
  EXPECT_EQ(comparison.tensors[comparison.first_divergence->inputs[0]].name, "x");
}

TEST(CompareFirstDivergence, ShapeMismatchesFailAndBaselineOnlyTensorsAreListed) {
  Comparator comparator{ToleranceTable(), false};
  comparator.add_baseline(captured("a", {1, 2}, {}));
  comparator.add_baseline(captured("gone", {1}, {}));
  comparator.add_candidate(captured("a", {1, 2, 3}, {}));
  comparator.add_candidate(captured("unlisted", {1}, {}));  // not listed without report_candidate_only
  const Comparison comparison = std::move(comparator).finish();
  ASSERT_EQ(comparison.tensors.size(), 2u);
  EXPECT_EQ(comparison.tensors[0].status, TensorStatus::ShapeMismatch);
  EXPECT_EQ(comparison.tensors[1].status, TensorStatus::OnlyBaseline);
  EXPECT_TRUE(comparison.failed());
}

// ---------------------------------------------------------------- against the f64 truth

// y = x w, one row of 64 terms of about 3e3, the first half positive, that cancel to about 1e-3: two correct
// f32 sums (forward and backward order, their partial sums near 1e5) differ by far more than a fixed tolerance relative to |y| allows, yet each lies within
// the summation bound gamma_k(u) sum|x_i w_i| of the exact result; a sum that drops its last term is a fault.
struct CancellingMatmul {
  static constexpr int64_t kTerms = 64;
  std::vector<double> x, w;
  CancellingMatmul() {
    for (int64_t i = 0; i < kTerms; ++i) {
      x.push_back((i < kTerms / 2 ? 1.0 : -1.0) * (1e4 + 0.37 * static_cast<double>(i % 2)) / 3.0);
      w.push_back(1.0 + static_cast<double>(i % 5) * 1e-7);
    }
  }
  // The f32 sum of the products, from the first term (or the last), leaving out `dropped` terms at the end.
  float sum(bool backwards, int64_t dropped = 0) const {
    float total = 0;
    for (int64_t n = 0; n < kTerms - dropped; ++n) {
      const int64_t i = backwards ? kTerms - 1 - n - dropped : n;
      total += static_cast<float>(x[i]) * static_cast<float>(w[i]);
    }
    return total;
  }
  Tensor as_f32(const std::vector<double>& values, Shape shape) const {
    Tensor t = tensor_of(values).to(DType::F32);
    return t.reshape(shape);
  }
  Comparison compare(float b_value) const {
    Comparator comparator{ToleranceTable(), true};
    comparator.judge_against_truth(Rerun::Failing, "y", /*candidate_nodes=*/true);
    comparator.add_graph_input("x", as_f32(x, {1, kTerms}), false);
    comparator.add_graph_input("w", as_f32(w, {kTerms, 1}), false);
    const Attrs attrs{{"trans_a", false}, {"trans_b", false}};
    auto y = [&](float value) {
      Tensor t = Tensor::empty({1, 1}, DType::F32);
      t.data<float>()[0] = value;
      return CapturedTensor{"y", "matmul", DType::F32, DType::F32, t, 1.0, {"x", "w"}, attrs, 0};
    };
    comparator.add_baseline(y(sum(false)));
    comparator.add_candidate(y(b_value));
    return std::move(comparator).finish();
  }
};

TEST(CompareTruth, CancellationInALongSumIsRoundingAndADroppedTermIsAFault) {
  const CancellingMatmul matmul;
  double exact = 0, magnitude = 0;
  for (int64_t i = 0; i < CancellingMatmul::kTerms; ++i) {
    const double xi = static_cast<float>(matmul.x[i]), wi = static_cast<float>(matmul.w[i]);
    exact += xi * wi;
    magnitude += std::abs(xi * wi);
  }
  const double u = std::ldexp(1.0, -24), gamma = 64 * u / (1 - 64 * u);
  ASSERT_GT(std::abs(matmul.sum(true) - matmul.sum(false)), 1e-3 * std::abs(exact));  // far past f32's rtol
  const Comparison rounding = matmul.compare(matmul.sum(true));
  const ComparedTensor& y = rounding.tensors.at(0);
  EXPECT_EQ(y.status, TensorStatus::Fail);  // the fixed tolerance fails it
  EXPECT_EQ(y.verdict, Verdict::Rounding);
  EXPECT_FALSE(rounding.failed());
  EXPECT_EQ(y.truth_b.terms.reduction, 64);
  EXPECT_NEAR(y.truth_b.truth_at_worst, exact, 1e-9 * magnitude);
  EXPECT_NEAR(y.truth_b.bound_at_worst, u * std::abs(exact) + gamma * magnitude + y.truth_b.terms.floor, 1e-12 * magnitude);
  EXPECT_NEAR(y.truth_b.max_error, std::abs(matmul.sum(true) - exact), 1e-9 * magnitude);
  EXPECT_THAT(rounding.explanation, HasSubstr("y: op matmul"));
  EXPECT_THAT(rounding.explanation, HasSubstr("summation: u_out|y| + gamma_64(u_acc) sum|terms|"));

  const Comparison dropped = matmul.compare(matmul.sum(false, 1));
  EXPECT_EQ(dropped.tensors.at(0).verdict, Verdict::Fault);
  EXPECT_TRUE(dropped.tensors.at(0).truth_a.within());
  EXPECT_FALSE(dropped.tensors.at(0).truth_b.within());
  ASSERT_TRUE(dropped.first_divergence);
  EXPECT_EQ(verdict_text(Verdict::Fault, dropped.tensors.at(0).truth_a, dropped.tensors.at(0).truth_b), "fault on b");
}

// A step's loss is judged against 4x the spread side a showed with its sums reordered, where both sides
// compute in one precision; otherwise (and without a spread) its tolerance group judges it.
TEST(CompareTruth, StepLossesAreJudgedAgainstTheSpreadOfAReorderedRun) {
  auto judged = [](double loss_b, DType precision_b) {
    Comparator comparator{ToleranceTable(), true};
    comparator.judge_against_truth(Rerun::Failing, "", true);
    comparator.set_step_spread({{"step2.loss", 1e-6}});
    comparator.add_baseline({"step2.loss", kStepLossOp, DType::F64, DType::F32, tensor_of({5.0}).reshape({}), 1.0, {}});
    comparator.add_candidate({"step2.loss", kStepLossOp, DType::F64, precision_b, tensor_of({loss_b}).reshape({}), 1.0, {}});
    return std::move(comparator).finish().tensors.at(0);
  };
  const ComparedTensor close = judged(5.0 + 3.9e-6, DType::F32);  // within 4 x 1e-6
  EXPECT_EQ(close.verdict, Verdict::Rounding);
  EXPECT_DOUBLE_EQ(close.step_bound, 4e-6);
  const ComparedTensor apart = judged(5.0 + 4.1e-6, DType::F32);
  EXPECT_EQ(apart.verdict, Verdict::Fault);
  EXPECT_EQ(apart.status, TensorStatus::Pass);  // the tolerance alone would pass it
  EXPECT_TRUE(apart.failed());
  EXPECT_EQ(judged(5.0 + 4.1e-6, DType::BF16).verdict, Verdict::NotRerun);  // bf16 against f32: its group judges
}

// A parameter after steps that its f32 group fails: a few elements moved apart within both runs' AdamW reach
// are rounding that AdamW amplified; every element moved (a changed learning rate) is a fault.
TEST(CompareTruth, ParametersPastTheirToleranceAreAmplifiedRoundingOnlyOnAFewElements) {
  auto judged = [](int64_t moved, double by) {
    std::vector<double> a(1000, 0.01), b = a;
    for (int64_t i = 0; i < moved; ++i) b[static_cast<size_t>(i * 7 % 1000)] += by;
    Comparator comparator{ToleranceTable(), true};
    comparator.judge_against_truth(Rerun::Failing, "", true);
    CapturedTensor side_a{"step1.w", kStepParamOp, DType::F32, DType::F32, tensor_of(a), 1.0, {}};
    CapturedTensor side_b{"step1.w", kStepParamOp, DType::F32, DType::F32, tensor_of(b), 1.0, {}};
    side_a.update_reach = side_b.update_reach = 1.5e-3;
    comparator.add_baseline(std::move(side_a));
    comparator.add_candidate(std::move(side_b));
    return std::move(comparator).finish().tensors.at(0);
  };
  const ComparedTensor amplified = judged(5, 2e-3);  // 0.5% of the elements, each by 2e-3 < 3e-3
  EXPECT_EQ(amplified.status, TensorStatus::Fail);
  EXPECT_EQ(amplified.verdict, Verdict::Rounding);
  EXPECT_DOUBLE_EQ(amplified.step_bound, 3e-3);
  EXPECT_FALSE(amplified.failed());
  EXPECT_EQ(judged(1000, 1e-4).verdict, Verdict::Fault);  // every element, though well within the reach
  EXPECT_EQ(judged(5, 4e-3).verdict, Verdict::Fault);     // past the reach
}

// ---------------------------------------------------------------- whole runs

class CompareRunsTest : public ::testing::Test {
 protected:
  CompareRequest request(std::vector<std::string> a, std::vector<std::string> b, const std::string& extra = "") {
    return {.config = testing::write_tiny_compare_job(dir_.path(), extra).string(), .a = std::move(a), .b = std::move(b)};
  }
  static const ComparedTensor* find(const Comparison& comparison, const std::string& name) {
    for (const ComparedTensor& t : comparison.tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
  static std::string first_divergence(const Comparison& comparison) {
    return comparison.first_divergence ? comparison.tensors[comparison.first_divergence->tensor].name : "(none)";
  }
  testing::TempDir dir_;
};

TEST_F(CompareRunsTest, RefAgainstCpuPassesInF32) {
  CompareRequest both = request({"ops.backend=ref"}, {"ops.backend=cpu"});
  both.steps = 2;
  const Comparison comparison = compare_runs(both).comparison;
  EXPECT_FALSE(comparison.failed()) << first_divergence(comparison);
  int gradients = 0;
  for (const ComparedTensor& t : comparison.tensors) {
    EXPECT_EQ(t.status, TensorStatus::Pass) << t.name;
    EXPECT_EQ(t.group.substr(0, 3), "f32") << t.name;
    gradients += t.op == kParamGradOp;
  }
  EXPECT_EQ(gradients, 2 + 12 * 2 + 2);  // wte, wpe, 12 per block, ln_f: every parameter, the tied one once
  for (const char* name : {"wte.forward.out", "transformer.h.1.mlp.residual.forward.out", "lm_head.forward.out",
                           "loss.forward.loss", "transformer.wte.weight.grad", "step2.loss", "step2.grad_norm",
                           "step2.transformer.h.0.attn.c_attn.weight"}) {
    EXPECT_NE(find(comparison, name), nullptr) << name;
  }
}

// A backend identical to cpu but for gelu, whose outputs it perturbs by up to 0.1%: registered here
// only, under its own name.
void register_noisy_gelu_backend() {
  static const bool registered = [] {
    const Backend& cpu = get_backend("cpu");
    auto noisy = std::make_unique<Backend>("noisy_gelu");
    for (const auto& [op, dtype] : cpu.kernels()) {
      if (op == "gelu" && dtype == DType::F32) continue;
      if (cpu.is_emulated(op, dtype)) {
        noisy->add_emulated_kernel(op, dtype, *cpu.find(op, dtype));
      } else {
        noisy->add_kernel(op, dtype, *cpu.find(op, dtype));
      }
    }
    noisy->add_kernel("gelu", DType::F32, [gelu = *cpu.find("gelu", DType::F32)](const Tensors& inputs,
                                                                                  const Tensors& outputs,
                                                                                  const Attrs& attrs) {
      gelu(inputs, outputs, attrs);
      float* y = outputs[0].data<float>();
      for (int64_t i = 0; i < outputs[0].numel(); ++i) y[i] *= 1.0f + 1e-3f * static_cast<float>(i % 7 - 3) / 3.0f;
    });
    register_backend(std::move(noisy));
    return true;
  }();
  (void)registered;
}

TEST_F(CompareRunsTest, APerturbedKernelIsTheFirstDivergentOp) {
  register_noisy_gelu_backend();
  const Comparison comparison = compare_runs(request({}, {"ops.backend=noisy_gelu"})).comparison;
  ASSERT_TRUE(comparison.failed());
  ASSERT_TRUE(comparison.first_divergence);
  const ComparedTensor& blamed = comparison.tensors[comparison.first_divergence->tensor];
  EXPECT_EQ(blamed.name, "transformer.h.0.mlp.gelu.forward.y");
  EXPECT_EQ(blamed.op, "gelu");
  std::vector<std::string> inputs;
  for (size_t input : comparison.first_divergence->inputs) {
    inputs.push_back(comparison.tensors[input].name);
    EXPECT_EQ(comparison.tensors[input].status, TensorStatus::Pass);
  }
  EXPECT_THAT(inputs, ElementsAre("transformer.h.0.mlp.c_fc.forward.y"));
  // Everything before it in the forward pass agrees.
  for (size_t i = 0; i < comparison.first_divergence->tensor; ++i) {
    EXPECT_EQ(comparison.tensors[i].status, TensorStatus::Pass) << comparison.tensors[i].name;
  }
}

// Mixed precision is judged in the dtype each tensor was computed through: bf16 tensors pass the
// bf16 group's tolerance, and fail when [compare.bf16] is made as tight as f32's.
TEST_F(CompareRunsTest, Bf16AgainstF32PassesItsGroupButNotF32Tolerances) {
  const Comparison loose = compare_runs(request({}, {"precision.compute=bf16"})).comparison;
  EXPECT_FALSE(loose.failed()) << first_divergence(loose);
  const ComparedTensor* c_attn = find(loose, "transformer.h.0.attn.c_attn.forward.y");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->group, "bf16");
  EXPECT_EQ(c_attn->dtype_b, DType::BF16);
  // An f32 LayerNorm fed by bf16 matmuls carries their error: judged as bf16 too.
  const ComparedTensor* ln_2 = find(loose, "transformer.h.0.ln_2.forward.y");
  ASSERT_NE(ln_2, nullptr);
  EXPECT_EQ(ln_2->dtype_b, DType::F32);
  EXPECT_EQ(ln_2->group, "bf16");
  // What the first bf16 op reads has seen no bf16 op yet: f32, and exact.
  EXPECT_EQ(find(loose, "transformer.h.0.ln_1.forward.y")->group, "f32");

  // Parameters after steps: within both runs' AdamW reach, though rounding flips the updates of biases whose
  // gradients are below bf16's resolution (their cosine alone would fail them); not once the runs start apart.
  CompareRequest stepped = request({}, {"precision.compute=bf16"});
  stepped.steps = 3;
  const Comparison steps = compare_runs(stepped).comparison;
  EXPECT_FALSE(steps.failed()) << first_divergence(steps);
  const ComparedTensor* bias = find(steps, "step3.transformer.h.0.attn.c_attn.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->group, "bf16.step_param");
  EXPECT_GT(bias->tolerance.update_reach, 0);
  const Tolerance values_alike = ToleranceTable().lookup("gelu", DType::BF16).tolerance;
  int flipped = 0;
  for (const ComparedTensor& t : steps.tensors) flipped += t.op == kStepParamOp && !values_alike.passes(t.metrics);
  EXPECT_GT(flipped, 0);  // what the bf16 group of the graph's tensors would fail
  CompareRequest apart = request({}, {"precision.compute=bf16", "train.seed=7"});
  apart.steps = 1;
  EXPECT_EQ(find(compare_runs(apart).comparison, "step1.transformer.h.0.attn.c_attn.weight")->status,
            TensorStatus::Fail);

  const ToleranceTable::Group f32 = ToleranceTable().lookup("matmul", DType::F32);
  const std::string tight = fmt::format("[compare.bf16]\nmin_cosine = {}\nrtol = {}\natol = {}\n",
                                        f32.tolerance.min_cosine, f32.tolerance.rtol, f32.tolerance.atol);
  CompareRequest tolerances_only = request({}, {"precision.compute=bf16"}, tight);
  tolerances_only.rerun = Rerun::None;
  const Comparison strict = compare_runs(tolerances_only).comparison;
  EXPECT_TRUE(strict.failed());
  EXPECT_EQ(first_divergence(strict), "transformer.h.0.attn.c_attn.forward.y");  // the first op in bf16
  // Re-run in f64, each side is within its ops' bounds of the truth of its own inputs: rounding, no fault.
  const Comparison judged = compare_runs(request({}, {"precision.compute=bf16"}, tight)).comparison;
  EXPECT_FALSE(judged.failed()) << first_divergence(judged);
  EXPECT_EQ(find(judged, "transformer.h.0.attn.c_attn.forward.y")->verdict, Verdict::Rounding);
}

// Fused ops' outputs keep the names of the values they stand for: the residual sums and norms a
// fused add+LayerNorm makes are compared with the unfused graph's.
TEST_F(CompareRunsTest, FusedAndUnfusedGraphsShareTheirTensorsNames) {
  const Comparison comparison = compare_runs(request({"ops.fuse=false"}, {"ops.fuse=true"})).comparison;
  EXPECT_FALSE(comparison.failed()) << first_divergence(comparison);
  for (const char* name : {"transformer.h.0.mlp.residual.forward.out", "transformer.h.1.ln_1.forward.y"}) {
    const ComparedTensor* t = find(comparison, name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->status, TensorStatus::Pass) << name;
    EXPECT_EQ(t->op, "add_layernorm") << name;
  }
}

}  // namespace
}  // namespace strata
