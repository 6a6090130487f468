#include "planner/explain.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "planner/report.h"

namespace strata {

namespace {

const char* class_name(OpKind kind) {
  switch (kind) {
    case OpKind::Gemm: return "compute: GEMMs";
    case OpKind::Attention: return "compute: attention";
    case OpKind::Other: return "compute: memory-bound and element-wise ops";
  }
  return "compute";
}

// A mixture of experts' grouped GEMMs: their efficiency on the active experts' FLOPs, at the busiest
// expert's rows.
void add_expert_terms(PlanExplanation& out, const CostModel::StepAttribution& attribution,
                      const PlanningProblem& problem, double peak) {
  const CostModel::ClassTime& experts = attribution.expert_gemms;
  if (experts.seconds > 0) {
    out.terms.push_back(
        {"compute: experts' grouped GEMMs", experts.seconds,
         fmt::format("{:.0f}% of the matrix peak; {:.0f} rows per expert (the busiest, imbalance {:.2f}), {} experts "
                     "per device",
                     100 * experts.flops / experts.seconds / peak, attribution.expert_rows, problem.moe_imbalance,
                     attribution.experts_per_device)});
  }
}

PlanExplanation explain_one(CostModel& model, const Prediction& prediction) {
  PlanExplanation out{prediction, 0, {}, {}};
  const CostModel::StepAttribution attribution = model.attribute(prediction);
  out.stage = attribution.stage;
  const PlanningProblem& problem = model.problem();
  const double peak = problem.cluster.device.performance(problem.dtype).matrix_flops;
  for (const auto& [kind, time] : attribution.compute) {
    std::string detail;
    if (kind != OpKind::Other && time.seconds > 0) {
      detail = fmt::format("{:.0f}% of the matrix peak", 100 * time.flops / time.seconds / peak);
    }
    out.terms.push_back({class_name(kind), time.seconds, detail});
  }
  for (const auto& [op, time] : attribution.compute_by_op) out.ops.push_back({op, time.seconds, time.flops});
  std::stable_sort(out.ops.begin(), out.ops.end(), [](const OpShare& a, const OpShare& b) { return a.seconds > b.seconds; });
  add_expert_terms(out, attribution, problem, peak);
  const CostModel::ClassTime& fp8 = attribution.fp8_gemms;
  if (fp8.seconds > 0) {
    out.terms.push_back({"compute: float8 GEMMs", fp8.seconds,
                         fmt::format("{:.0f}% of the float8 matrix peak", 100 * fp8.flops / fp8.seconds /
                                                                            problem.cluster.device.fp8_performance().matrix_flops)});
  }
  out.terms.insert(out.terms.end(), attribution.comm.begin(), attribution.comm.end());
  const TimeBreakdown& t = prediction.time;
  const std::vector<ExplainTerm> rest = {
      {"pipeline bubble", t.bubble, ""},
      {"ZeRO-2/3 collectives not hidden", t.zero_comm, ""},
      attribution.reduction,
      {"compute slowed by collectives beside it", t.overlap_slowdown, "data-parallel reduction, ZeRO"},
      {"FSDP's copies around its collectives", t.fsdp_copies, "casts, gathered units and gradients copied"},
      {"weight all-gather (ZeRO-1/2)", t.param_gather, ""},
      {"gradient accumulation", t.grad_accumulation, ""},
      {"optimizer", t.optimizer, "clipping and AdamW"},
  };
  for (const ExplainTerm& term : rest) {
    if (term.seconds > 0) out.terms.push_back(term);
  }
  std::stable_sort(out.terms.begin(), out.terms.end(),
                   [](const ExplainTerm& a, const ExplainTerm& b) { return a.seconds > b.seconds; });
  return out;
}

struct Perturbation {
  std::string figure;
  std::function<void(ClusterSpec&)> apply;
};

// Every engine of the device: each dtype's and the float8 one float8 linears run on.
void each_dtype(ClusterSpec& c, const std::function<void(DTypePerformance&)>& f) {
  for (auto& [dtype, perf] : c.device.dtypes) f(perf);
  if (c.device.fp8) f(*c.device.fp8);
}

// Each figure of the description 10% worse (slower, or costlier).
std::vector<Perturbation> perturbations(const ClusterSpec& cluster) {
  std::vector<Perturbation> list = {
      {"matrix peak", [](ClusterSpec& c) { each_dtype(c, [](DTypePerformance& p) { p.matrix_flops *= 0.9; }); }},
      {"GEMM tile efficiencies",
       [](ClusterSpec& c) {
         each_dtype(c, [](DTypePerformance& p) {
           for (GemmTile& tile : p.gemm.tiles) tile.efficiency *= 0.9;
         });
       }},
      {"GEMM fixed cost per tile",
       [](ClusterSpec& c) { each_dtype(c, [](DTypePerformance& p) { p.gemm.tile_overhead_s *= 1.1; }); }},
      {"attention efficiencies",
       [](ClusterSpec& c) {
         each_dtype(c, [](DTypePerformance& p) {
           auto slower = [](AttentionEngine& engine) {
             engine.forward_efficiency *= 0.9;
             engine.backward_efficiency *= 0.9;
           };
           slower(p.attention);
           // A run calling another library is priced again on that library's engine.
           for (auto& [name, engine] : p.attention_libraries) slower(engine);
         });
       }},
      {"vector peak", [](ClusterSpec& c) { each_dtype(c, [](DTypePerformance& p) { p.vector_flops *= 0.9; }); }},
      {"memory bandwidth", [](ClusterSpec& c) { c.device.memory_bandwidth_Bps *= 0.9; }},
      {"launch overhead", [](ClusterSpec& c) { c.device.op_overhead_s *= 1.1; }},
      {"intra-node bandwidth", [](ClusterSpec& c) { c.intra_node.bandwidth_Bps *= 0.9; }},
      {"intra-node latency", [](ClusterSpec& c) { c.intra_node.latency_s *= 1.1; }},
  };
  if (cluster.nodes > 1) {
    list.push_back({"network bandwidth", [](ClusterSpec& c) { c.nic.bandwidth_Bps *= 0.9; }});
    list.push_back({"network latency", [](ClusterSpec& c) { c.nic.latency_s *= 1.1; }});
  }
  bool sustained = false;
  for (const auto& [dtype, perf] : cluster.device.dtypes) sustained = sustained || perf.sustained_matrix_flops > 0;
  if (sustained) {
    list.push_back({"sustained matrix rate", [](ClusterSpec& c) {
                      each_dtype(c, [](DTypePerformance& p) { p.sustained_matrix_flops *= 0.9; });
                    }});
  }
  if (cluster.device.comm_compute_slowdown > 0) {
    list.push_back({"compute slowdown beside collectives", [](ClusterSpec& c) { c.device.comm_compute_slowdown *= 1.1; }});
  }
  return list;
}

double priced_again(const PlanningProblem& problem, const ParallelPlan& plan) {
  CostModel model(problem);
  return model.evaluate(plan, CostModel::PipelineTiming::Replayed).step_s;
}

}  // namespace

Explanation explain_plans(CostModel& model, const Prediction& winner, const Prediction* runner_up) {
  Explanation explanation{explain_one(model, winner), std::nullopt, {}};
  if (runner_up != nullptr) explanation.runner_up = explain_one(model, *runner_up);
  const double base_winner = priced_again(model.problem(), winner.plan);
  const double base_runner = runner_up ? priced_again(model.problem(), runner_up->plan) : 0.0;
  auto sensitivity = [&](const std::string& figure, const PlanningProblem& problem) {
    Sensitivity s{figure, priced_again(problem, winner.plan) / base_winner - 1, 0, false};
    if (runner_up != nullptr) {
      const double runner = priced_again(problem, runner_up->plan);
      s.runner_up_change = runner / base_runner - 1;
      // A flip is a change of sign of the difference beyond ties (0.1%).
      const double before = base_runner / base_winner - 1;
      const double after = runner / (base_winner * (1 + s.winner_change)) - 1;
      s.order_flips = std::fabs(after) > 1e-3 && (after < 0) != (before < 0);
    }
    explanation.sensitivities.push_back(s);
  };
  for (const Perturbation& p : perturbations(model.problem().cluster)) {
    PlanningProblem problem = model.problem();
    p.apply(problem.cluster);
    sensitivity(p.figure, problem);
  }
  if (model.problem().model.num_experts > 0) {  // the user's guess, not the cluster's: 10% more of it
    PlanningProblem problem = model.problem();
    problem.moe_imbalance *= 1.1;
    sensitivity("experts' imbalance (--moe-imbalance)", problem);
  }
  std::stable_sort(explanation.sensitivities.begin(), explanation.sensitivities.end(),
                   [](const Sensitivity& a, const Sensitivity& b) {
                     return std::fabs(a.winner_change) > std::fabs(b.winner_change);
                   });
  return explanation;
}

std::string format_explanation(const Explanation& e) {
  std::string out;
  auto plan_block = [&](const char* role, const PlanExplanation& p) {
    out += fmt::format("{}: {}  (step {}; terms on pipeline stage {})\n", role, p.prediction.plan.describe(),
                       seconds_text(p.prediction.step_s), p.stage);
    if (const std::optional<std::string> note = not_run_by_strata(p.prediction.plan)) out += fmt::format("  {}\n", *note);
    for (const ExplainTerm& term : p.terms) {
      out += fmt::format("  {:<46} {:>11} {:>5.1f}%{}\n", term.name, seconds_text(term.seconds),
                         100 * term.seconds / p.prediction.step_s, term.detail.empty() ? "" : "  " + term.detail);
    }
    out += "  compute by op type (the largest ten):";
    for (size_t i = 0; i < std::min<size_t>(10, p.ops.size()); ++i) {
      out += fmt::format("{} {} {}", i == 0 ? "" : ",", p.ops[i].op, seconds_text(p.ops[i].seconds));
    }
    out += "\n";
  };
  out += "\nexplain\n";
  plan_block("winner", e.winner);
  if (e.runner_up) {
    plan_block("runner-up", *e.runner_up);
    std::string reasons;
    for (const std::string& phrase : explain_difference(e.winner.prediction, e.runner_up->prediction)) {
      reasons += (reasons.empty() ? "" : "; ") + phrase;
    }
    out += fmt::format("the runner-up loses by {:.1f}%: {}\n",
                       100 * (e.runner_up->prediction.step_s / e.winner.prediction.step_s - 1),
                       reasons.empty() ? "the same prediction" : reasons);
  }
  out += "sensitivity (each figure of the cluster description 10% worse):\n";
  for (const Sensitivity& s : e.sensitivities) {
    out += fmt::format("  {:<38} winner {:+6.2f}%", s.figure, 100 * s.winner_change);
    if (e.runner_up) out += fmt::format("  runner-up {:+6.2f}%{}", 100 * s.runner_up_change, s.order_flips ? "  ORDER FLIPS" : "");
    out += "\n";
  }
  return out;
}

nlohmann::json explanation_json(const Explanation& e) {
  auto plan_json_of = [](const PlanExplanation& p) {
    nlohmann::json terms = nlohmann::json::array();
    for (const ExplainTerm& t : p.terms) terms.push_back({{"name", t.name}, {"seconds", t.seconds}, {"detail", t.detail}});
    nlohmann::json ops = nlohmann::json::array();
    for (const OpShare& o : p.ops) ops.push_back({{"op", o.op}, {"seconds", o.seconds}, {"flops", o.flops}});
    return nlohmann::json{{"plan", p.prediction.plan.describe()}, {"step_s", p.prediction.step_s}, {"stage", p.stage},
                          {"terms", terms}, {"compute_by_op", ops}};
  };
  nlohmann::json out{{"winner", plan_json_of(e.winner)}};
  if (e.runner_up) out["runner_up"] = plan_json_of(*e.runner_up);
  nlohmann::json sensitivities = nlohmann::json::array();
  for (const Sensitivity& s : e.sensitivities) {
    sensitivities.push_back({{"figure", s.figure},
                             {"winner_change", s.winner_change},
                             {"runner_up_change", s.runner_up_change},
                             {"order_flips", s.order_flips}});
  }
  out["sensitivity"] = sensitivities;
  return out;
}

}  // namespace strata
