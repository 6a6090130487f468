// The f32, bf16 and f16 kernels of `ref` against its f64 kernels. Both runs get
// the same input values (rounded to the narrow type first), so the narrow
// result may differ from the f64 one only by rounding each output element to
// its type: the tolerance is one unit in the last place of that type.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

// How an input's type follows the type under test.
enum class Role {
  Data,    // the type under test
  Stats,   // f32, or f64 for f64 data (norm statistics, log-sum-exp, loss)
  Index,   // unchanged integer ids
  Master,  // always f32 (AdamW's param and moments)
};

struct Input {
  Tensor value;  // f64, or integer for Role::Index
  Role role;
};

struct OpCase {
  std::vector<Input> inputs;
  Attrs attrs;
};

DType stats_type(DType data) { return data == DType::F64 ? DType::F64 : DType::F32; }

// The mixture-of-experts ops: six tokens of width 3 routed top-2 over four experts, one dropped by a
// capacity factor of 0.9: 3 rows per expert.
OpCase make_moe_case(const std::string& op) {
  const Attrs route{{"top_k", int64_t{2}}, {"scoring", std::string("softmax")}, {"norm_topk_prob", true},
                    {"capacity_factor", 0.9}};
  const Tensor logits = random_tensor({2, 3, 4}, 1, 2.0);
  const Tensors plan = run_ref("moe_route", {logits}, route);
  const Input rows{plan[2], Role::Index}, sizes{plan[3], Role::Index};
  if (op == "moe_route") return {{{logits, Role::Data}}, route};
  if (op == "moe_route_backward") {
    return {{{random_tensor({2, 3, 2}, 2), Role::Data}, {logits, Role::Data}, {plan[1], Role::Index}}, route};
  }
  if (op == "moe_router_loss_terms") return {{{logits, Role::Data}}, {}};
  if (op == "moe_router_loss_terms_backward") {
    return {{{random_tensor({4}, 2), Role::Stats}, {make_tensor({}, {0.7}), Role::Stats}, {logits, Role::Data}}, {}};
  }
  const Attrs aux{{"tokens", int64_t{6}}, {"aux_coef", 0.01}, {"z_coef", 0.001}};
  if (op == "moe_aux_loss") {
    return {{{random_tensor({4}, 2), Role::Data}, {make_tensor({}, {2.5}), Role::Data}, {plan[4], Role::Data}}, aux};
  }
  if (op == "moe_aux_loss_backward") return {{{make_tensor({}, {1.5}), Role::Data}, {plan[4], Role::Data}}, aux};
  if (op == "moe_permute") return {{{random_tensor({2, 3, 3}, 2), Role::Data}, rows}, {}};
  if (op == "moe_permute_backward") return {{{random_tensor({12, 3}, 2), Role::Data}, rows}, {}};
  if (op == "moe_combine") return {{{random_tensor({12, 3}, 2), Role::Data}, {plan[0], Role::Data}, rows}, {}};
  if (op == "moe_combine_backward") {
    return {{{random_tensor({2, 3, 3}, 3), Role::Data}, {random_tensor({12, 3}, 2), Role::Data},
             {plan[0], Role::Data}, rows},
            {}};
  }
  if (op == "grouped_matmul") {
    return {{{random_tensor({12, 3}, 2), Role::Data}, {random_tensor({4, 5, 3}, 3), Role::Data}, sizes},
            {{"trans_b", true}}};
  }
  if (op == "grouped_matmul_weight_grad") {
    return {{{random_tensor({12, 3}, 2), Role::Data}, {random_tensor({12, 5}, 3), Role::Data}, sizes}, {}};
  }
  ADD_FAILURE() << "no dtype-agreement case for op '" << op << "'";
  return {};
}

// f64 values for every op; backward ops get their saved tensors from the f64 forward.
OpCase make_case(const std::string& op) {
  const Attrs plain{{"trans_a", false}, {"trans_b", false}};
  Tensor ids = make_indices({2, 3}, {3, 0, 3, 1, 4, 2}, DType::I32);
  if (op == "embedding") return {{{random_tensor({5, 4}, 1), Role::Data}, {ids, Role::Index}}, {}};
  if (op == "embedding_backward") {
    return {{{random_tensor({2, 3, 4}, 1), Role::Data}, {ids, Role::Index}}, {{"num_embeddings", int64_t{5}}}};
  }
  if (op == "add") return {{{random_tensor({3, 4}, 1), Role::Data}, {random_tensor({4}, 2), Role::Data}}, {}};
  if (op == "sum_to") return {{{random_tensor({3, 4}, 1), Role::Data}}, {{"shape", std::vector<int64_t>{4}}}};
  if (op == "reshape") {
    return {{{random_tensor({2, 3, 4}, 1), Role::Data}}, {{"keep", int64_t{2}}, {"tail", std::vector<int64_t>{2, 2}}}};
  }
  if (op == "scale") return {{{random_tensor({3, 4}, 1), Role::Data}}, {{"factor", 0.3}}};
  if (op == "sum_squares") return {{{random_tensor({3, 4}, 1), Role::Data}}, {}};
  if (op == "gelu") return {{{random_tensor({3, 4}, 1, 2.0), Role::Data}}, {}};
  if (op == "gelu_backward") {
    return {{{random_tensor({3, 4}, 1), Role::Data}, {random_tensor({3, 4}, 2, 2.0), Role::Data}}, {}};
  }
  if (op == "swiglu") {
    return {{{random_tensor({3, 4}, 1, 2.0), Role::Data}, {random_tensor({3, 4}, 2), Role::Data}}, {}};
  }
  if (op == "swiglu_backward") {
    return {{{random_tensor({3, 4}, 1), Role::Data}, {random_tensor({3, 4}, 2, 2.0), Role::Data},
             {random_tensor({3, 4}, 3), Role::Data}},
            {}};
  }
  if (op == "adamw") {
    return {{{random_tensor({6}, 1), Role::Master},
             {random_tensor({6}, 2), Role::Data},
             {random_tensor({6}, 3, 0.1), Role::Master},
             {make_tensor({6}, {0.01, 0.02, 0.5, 1e-4, 0.3, 0.0}), Role::Master}},
            {{"lr", 1e-2}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}, {"step", int64_t{4}},
             {"grad_scale", 0.5}}};
  }
  if (op == "layernorm") {
    return {{{random_tensor({3, 8}, 1, 2.0), Role::Data}, {random_tensor({8}, 2), Role::Data},
             {random_tensor({8}, 3), Role::Data}},
            {{"eps", 1e-5}}};
  }
  if (op == "layernorm_backward") {
    Tensor x = random_tensor({3, 8}, 1, 2.0), gamma = random_tensor({8}, 2);
    Tensors forward = run_ref("layernorm", {x, gamma, random_tensor({8}, 3)}, {{"eps", 1e-5}});
    return {{{random_tensor({3, 8}, 4), Role::Data}, {x, Role::Data}, {gamma, Role::Data},
             {forward[1], Role::Stats}, {forward[2], Role::Stats}},
            {}};
  }
  if (op == "matmul") return {{{random_tensor({2, 3, 4}, 1), Role::Data}, {random_tensor({4, 5}, 2), Role::Data}}, plain};
  if (op == "linear") {
    return {{{random_tensor({2, 3, 4}, 1), Role::Data}, {random_tensor({4, 5}, 2), Role::Data},
             {random_tensor({5}, 3), Role::Data}},
            {}};
  }
  const Attrs heads{{"n_head", int64_t{2}}};
  if (op == "attention") return {{{random_tensor({2, 4, 12}, 1), Role::Data}}, heads};
  if (op == "attention_backward") {
    Tensor qkv = random_tensor({2, 4, 12}, 1);
    Tensors forward = run_ref("attention", {qkv}, heads);
    return {{{random_tensor({2, 4, 4}, 2), Role::Data}, {qkv, Role::Data}, {forward[0], Role::Data},
             {forward[1], Role::Stats}},
            heads};
  }
  const Attrs grouped{{"n_head", int64_t{4}}, {"n_kv_head", int64_t{2}}};
  if (op == "grouped_attention") {
    return {{{random_tensor({2, 4, 8}, 1), Role::Data}, {random_tensor({2, 4, 4}, 2), Role::Data},
             {random_tensor({2, 4, 4}, 3), Role::Data}},
            grouped};
  }
  if (op == "grouped_attention_backward") {
    Tensor q = random_tensor({2, 4, 8}, 1), k = random_tensor({2, 4, 4}, 2), v = random_tensor({2, 4, 4}, 3);
    Tensors forward = run_ref("grouped_attention", {q, k, v}, grouped);
    return {{{random_tensor({2, 4, 8}, 4), Role::Data}, {q, Role::Data}, {k, Role::Data}, {v, Role::Data},
             {forward[0], Role::Data}, {forward[1], Role::Stats}},
            grouped};
  }
  if (op == "attention_cached") {
    return {{{random_tensor({2, 2, 4}, 1), Role::Data}, {random_tensor({2, 5, 4}, 2), Role::Data},
             {random_tensor({2, 5, 4}, 3), Role::Data}},
            {{"n_head", int64_t{2}}, {"position", int64_t{2}}}};
  }
  Tensor targets = make_indices({2, 3}, {6, 0, 3, 1, 4, 2});
  Tensor logits = random_tensor({2, 3, 7}, 1, 2.0);
  if (op == "cross_entropy") return {{{logits, Role::Data}, {targets, Role::Index}}, {}};
  if (op == "cross_entropy_backward") {
    Tensor lse = run_ref("cross_entropy", {logits, targets})[1];
    return {{{make_tensor({}, {1.5}), Role::Stats}, {logits, Role::Data}, {targets, Role::Index}, {lse, Role::Stats}},
            {}};
  }
  if (op == "cast") return {{{random_tensor({3, 4}, 1), Role::Data}}, {{"dtype", std::string("f64")}}};
  if (op == "split_heads") return {{{random_tensor({2, 3, 8}, 1), Role::Data}}, heads};
  if (op == "merge_heads") return {{{random_tensor({2, 2, 3, 4}, 1), Role::Data}}, {}};
  if (op == "bmm") {
    return {{{random_tensor({2, 3, 4}, 1), Role::Data}, {random_tensor({2, 4, 5}, 2), Role::Data}}, plain};
  }
  const Attrs softmax_scale{{"scale", 0.5}};
  if (op == "causal_softmax") return {{{random_tensor({2, 4, 4}, 1, 2.0), Role::Data}}, softmax_scale};
  if (op == "causal_softmax_backward") {
    Tensor p = run_ref("causal_softmax", {random_tensor({2, 4, 4}, 1, 2.0)}, softmax_scale)[0];
    return {{{random_tensor({2, 4, 4}, 2), Role::Data}, {p, Role::Data}}, softmax_scale};
  }
  if (op.rfind("moe_", 0) == 0 || op.rfind("grouped_matmul", 0) == 0) return make_moe_case(op);
  ADD_FAILURE() << "no dtype-agreement case for op '" << op << "'";
  return {};
}

const std::vector<std::string> kCovered = {
    "add", "adamw", "attention", "attention_backward", "attention_cached", "bmm", "cast", "causal_softmax",
    "causal_softmax_backward", "cross_entropy", "cross_entropy_backward", "embedding", "embedding_backward", "gelu",
    "gelu_backward", "grouped_attention", "grouped_attention_backward", "layernorm", "layernorm_backward", "linear",
    "matmul", "merge_heads", "reshape", "scale", "split_heads", "grouped_matmul", "grouped_matmul_weight_grad", "moe_route",
    "moe_route_backward", "moe_router_loss_terms", "moe_router_loss_terms_backward", "moe_aux_loss",
    "moe_aux_loss_backward", "moe_permute", "moe_permute_backward", "moe_combine", "moe_combine_backward",
    "sum_squares", "sum_to", "swiglu", "swiglu_backward"};
// Fused ops round their intermediates to the narrow type exactly as the ops they
// replace do, so they cannot match one f64 evaluation to one rounding; they are
// checked against those ops instead (tests/backends/fused_ops_test.cpp; adamw_with_copy,
// whose copy is the f32 update rounded again, in tests/backends/embedding_adamw_test.cpp).
const std::vector<std::string> kCheckedAgainstUnfusedOps = {
    "adamw_with_copy", "add_layernorm", "add_rms_norm", "fused_elementwise1", "fused_elementwise2", "fused_elementwise3",
    "fused_elementwise4", "layernorm_backward_add", "rms_norm_backward_add"};
// Ops that round intermediates to the narrow type where HuggingFace's PyTorch
// code does (the normalised value before the weight, rope's products); they
// are checked against those formulas in every dtype (tests/ops/llama_ops_test.cpp).
// sigmoid_gate rounds the sigmoid as PyTorch's shared-expert gate does (tests/ops/moe_ops_test.cpp).
const std::vector<std::string> kRoundedAsHuggingFace = {"rms_norm", "rms_norm_backward", "rope", "sigmoid_gate",
                                                        "sigmoid_gate_backward"};
// Exact ops have no rounding to compare; they are checked for exactness and for
// equal bits on every backend (tests/backends/square_sum_exact_test.cpp).
const std::vector<std::string> kExact = {"square_sum_exact"};
// Collectives return their input in one process (a group of one rank); over real ranks they are
// checked against one process in tests/parallel/mpi/ (the tensor-parallel MLP, the sequence axis,
// and GPT-2 split with and without sequence parallelism, where split_to_group places the positions;
// all_to_all's exchange and gradient in all_to_all_op_test.cpp, expert parallelism's exchanges and
// gather_to_group in expert_exchange_op_test.cpp).
// The stage boundary's two move bytes unchanged; they are checked by the pipeline cut chained in
// one process (tests/parallel/pipeline_part_test.cpp) and by every pipeline run.
const std::vector<std::string> kCollectives = {"all_gather",    "all_reduce",         "all_to_all",
                                               "copy_to_group", "receive_from_stage", "reduce_scatter",
                                               "send_to_stage", "split_to_group",     "gather_to_group",
                                               "moe_dispatch_exchange", "moe_return_exchange"};

// The type an input takes when the op runs in `dtype`.
DType input_type(const Input& input, DType dtype) {
  switch (input.role) {
    case Role::Data: return dtype;
    case Role::Stats: return stats_type(dtype);
    case Role::Index: return input.value.dtype();
    case Role::Master: return DType::F32;
  }
  return dtype;
}

// Relative spacing of the type's values (2^-mantissa bits) and its smallest subnormal.
double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::F32: return std::ldexp(1.0, -23);
    case DType::BF16: return std::ldexp(1.0, -7);
    case DType::F16: return std::ldexp(1.0, -10);
    default: return 0;
  }
}
double smallest_subnormal(DType dtype) { return dtype == DType::F16 ? std::ldexp(1.0, -24) : 1e-300; }

using AgreementParam = std::tuple<std::string, DType>;
class DtypeAgreementTest : public ::testing::TestWithParam<AgreementParam> {};

TEST_P(DtypeAgreementTest, NarrowKernelRoundsTheF64Result) {
  const auto& [op, dtype] = GetParam();
  OpCase op_case = make_case(op);
  Tensors wide, narrow;
  for (const Input& input : op_case.inputs) {
    if (input.role == Role::Index) {
      wide.push_back(input.value);
      narrow.push_back(input.value);
      continue;
    }
    Tensor rounded = input.value.to(input_type(input, dtype));
    narrow.push_back(rounded);
    wide.push_back(rounded.to(input_type(input, DType::F64)));
  }
  Tensors wide_out = run_ref(op, wide, op_case.attrs);
  Tensors narrow_out = run_ref(op, narrow, op_case.attrs);
  ASSERT_EQ(wide_out.size(), narrow_out.size());
  for (size_t i = 0; i < narrow_out.size(); ++i) {
    DType out_type = narrow_out[i].dtype();
    expect_all_near(narrow_out[i], values_of(wide_out[i]), smallest_subnormal(out_type), unit_roundoff(out_type),
                    op + " output " + std::to_string(i) + " (" + std::string(dtype_name(out_type)) + ")");
  }
}

std::string agreement_name(const ::testing::TestParamInfo<AgreementParam>& info) {
  return std::get<0>(info.param) + "_" + std::string(dtype_name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(AllOps, DtypeAgreementTest,
                         ::testing::Combine(::testing::ValuesIn(kCovered),
                                            ::testing::Values(DType::F32, DType::BF16, DType::F16)),
                         agreement_name);

TEST(RefCoverage, EveryStandardOpHasADtypeAgreementCase) {
  std::vector<std::string> covered = kCovered;
  covered.insert(covered.end(), kCheckedAgainstUnfusedOps.begin(), kCheckedAgainstUnfusedOps.end());
  covered.insert(covered.end(), kRoundedAsHuggingFace.begin(), kRoundedAsHuggingFace.end());
  covered.insert(covered.end(), kExact.begin(), kExact.end());
  covered.insert(covered.end(), kCollectives.begin(), kCollectives.end());
  std::sort(covered.begin(), covered.end());
  EXPECT_EQ(covered, OpRegistry::global().names());
}

TEST(RefCoverage, RefHasAKernelForEveryOpAndFloatType) {
  const Backend& ref = get_backend("ref");
  for (const std::string& op : OpRegistry::global().names()) {
    // AdamW's schemas fix param (their dtype-selecting input) to f32; exact square sums take f32 and bf16.
    std::vector<DType> types = op == "adamw" || op == "adamw_with_copy" ? std::vector<DType>{DType::F32}
                               : op == "square_sum_exact" ? std::vector<DType>{DType::F32, DType::BF16}
                                                          : std::vector<DType>{DType::F64, DType::F32, DType::BF16, DType::F16};
    for (DType dtype : types) EXPECT_NE(ref.find(op, dtype), nullptr) << op << " " << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace strata::testing
