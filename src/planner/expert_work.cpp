#include "planner/expert_work.h"

#include <cmath>

#include "core/error.h"

namespace strata {

double active_parameters(const ModelConfig& config) {
  const double idle_experts = static_cast<double>(config.num_experts - config.num_experts_per_tok);
  const double expert_weights = 3.0 * static_cast<double>(config.n_embd * config.moe_intermediate_size);
  const double layers = static_cast<double>(config.n_layer);
  return static_cast<double>(config.num_parameters()) - layers * idle_experts * expert_weights;
}

bool is_expert_gemm(const OpWork& op) {
  return op.kind == OpKind::Gemm && (op.op == "grouped_matmul" || op.op == "grouped_matmul_weight_grad");
}

bool is_expert_elementwise(const OpWork& op) {
  return op.kind == OpKind::Other && op.label.substr(0, op.label.find(':')).find("experts.") != std::string::npos;
}

double busiest_expert_rows(double rows, const ExpertLoad& load) {
  const double alignment = static_cast<double>(load.row_alignment);
  return std::ceil(load.imbalance * rows * load.ep / static_cast<double>(load.experts) / alignment) * alignment;
}

OpWork busiest_expert_gemm(const OpWork& op, const ExpertLoad& load, DType dtype) {
  STRATA_CHECK(is_expert_gemm(op) && load.experts > 0 && load.experts % load.ep == 0,
               "op {} priced as the experts' GEMM of {} experts over ep = {}", op.op, load.experts, load.ep);
  GemmShape shape = op.gemm;
  shape.batch = load.experts / load.ep;
  if (op.op == "grouped_matmul") {
    // [rows, k] times each expert's [k, n]: the rows split by expert.
    shape.m = static_cast<int64_t>(busiest_expert_rows(static_cast<double>(op.gemm.m), load));
  } else {
    // The weight gradient's output is [E, m, n] (op_work reads it as E·m rows); each expert's k are its rows.
    shape.m = op.gemm.m / load.experts;
    const double rows = op.flops / (2.0 * static_cast<double>(shape.m) * static_cast<double>(op.gemm.n));
    shape.k = static_cast<int64_t>(busiest_expert_rows(rows, load));
  }
  OpWork busiest = op;
  busiest.gemm = shape;
  const double batch = static_cast<double>(shape.batch), m = static_cast<double>(shape.m),
               n = static_cast<double>(shape.n), k = static_cast<double>(shape.k);
  busiest.flops = 2 * batch * m * n * k;
  busiest.bytes = batch * (m * k + k * n + m * n) * static_cast<double>(dtype_size(dtype));
  return busiest;
}

ExpertExchanges expert_exchanges(const ModelConfig& config, int64_t micro_batch, int64_t seq, DType dtype, int ep) {
  ExpertExchanges result;
  if (config.num_experts == 0 || ep == 1) return result;
  const Metas rows{{{micro_batch * seq * config.num_experts_per_tok, config.n_embd}, dtype},
                   {{config.num_experts}, DType::I32}};
  const Attrs attrs{{"group", std::string("ep")}, {"ranks", int64_t{ep}}};
  auto calls = [&](const std::string& name) {
    const OpSchema& schema = OpRegistry::global().get(name);
    Metas inputs = rows;
    if (name == "moe_return_exchange") {
      // It returns the rows the dispatch received: ep ranks' worth, with the counts received per (rank, expert).
      inputs[0].shape[0] *= ep;
      inputs.push_back({{ep, config.num_experts / ep}, DType::I32});
    }
    return schema.comm(inputs, schema.infer(inputs, attrs), attrs);
  };
  const CommCalls dispatch = calls("moe_dispatch_exchange"), back = calls("moe_return_exchange");
  for (const CommCalls* pass : {&dispatch, &back}) {
    result.forward.insert(result.forward.end(), pass->begin(), pass->end());
    result.backward.insert(result.backward.end(), pass->begin(), pass->end());
  }
  return result;
}

}  // namespace strata
