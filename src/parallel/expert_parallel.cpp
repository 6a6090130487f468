#include "parallel/expert_parallel.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "core/key_checks.h"
#include "graph/rewrite.h"
#include "model/family.h"
#include "ops/placement_rule.h"
#include "parallel/parallel_settings.h"
#include "parallel/parallelize.h"

namespace strata {

namespace {

// A stacked expert weight's rank `rank` of `degree`: its experts [rank E / P, (rank + 1) E / P).
TensorBox experts_box(const Shape& shape, int degree, int rank) {
  TensorBox box = whole_box(shape);
  box.lengths[0] = shape[0] / degree;
  box.offsets[0] = rank * box.lengths[0];
  return box;
}

void check_divides(const std::string& name, const Shape& shape, int degree) {
  if (shape.empty() || shape[0] % degree != 0) {
    fail("parallel.ep = {} does not divide the {} experts of '{}' (model.num_experts): each rank holds whole experts",
         degree, shape.empty() ? 0 : shape[0], name);
  }
}

// Rows in the experts' order after the dispatch (target values): the rows, and the exchange that
// put them there, which the values computed from them share.
struct ExchangedRows {
  int rows = -1;
  int local_sizes = -1;  // rows per local expert
  int received = -1;     // rows per source rank and local expert
  int group_sizes = -1;  // this rank's rows per expert, as sent
};

class ExpertParallelPass {
 public:
  ExpertParallelPass(const Graph& forward, const ShardingPlan& plan, const ExpertParallelRank& ep)
      : plan_(plan), ep_(ep), rewriter_(forward, [&](const Value& param) {
          if (!plan.stacked_over_experts(param.name)) return param.meta;
          check_divides(param.name, param.meta.shape, ep.degree);
          return TensorMeta{experts_box(param.meta.shape, ep.degree, ep.rank).lengths, param.meta.dtype};
        }) {
    for (int id = 0; id < forward.num_values(); ++id) {
      const Value& value = forward.value(id);
      if (value.kind != ValueKind::Param || !plan.stacked_over_experts(value.name)) continue;
      layouts_[rewriter_.map(id)] = ValueLayout{.kind = ValueLayout::Kind::Split,
                                                .dim = 0,
                                                .group = ep.group,
                                                .shape = target().value(rewriter_.map(id)).meta.shape};
    }
  }

  ParallelForward run() && {
    const Graph& source = rewriter_.source();
    for (int id = 0; id < source.num_nodes(); ++id) place_node(id);
    return {.rewritten = std::move(rewriter_).finish(), .layouts = std::move(layouts_)};
  }

 private:
  Graph& target() { return rewriter_.target(); }
  const ExchangedRows* exchanged(int source_value) const {
    const auto found = exchanged_.find(source_value);
    return found == exchanged_.end() ? nullptr : &found->second;
  }
  Attrs group_attrs() const { return {{"group", ep_.group}, {"ranks", static_cast<int64_t>(ep_.degree)}}; }

  void place_node(int id) {
    const Node& n = rewriter_.source().node(id);
    const PlacementRule rule = OpRegistry::global().get(n.op).placement;
    if (rule == PlacementRule::ExpertGroups) return grouped_gemm(n);
    if (std::none_of(n.inputs.begin(), n.inputs.end(), [&](int v) { return exchanged(v); })) {
      rewriter_.copy_node(id);
      return;
    }
    if (rule == PlacementRule::ExpertCombine && exchanged(n.inputs[0])) return combine(n);
    if (rule == PlacementRule::Elementwise) return elementwise(n);
    refuse(n, fmt::format("reads the experts' rows after the token exchange, and its op's placement rule ({}) does "
                          "not place them",
                          placement_rule_name(rule)));
  }

  // Rows in moe_permute's order go to their experts' ranks once, whichever GEMM reads them first.
  const ExchangedRows& dispatch(const Node& n) {
    const int x = n.inputs[0];
    if (const ExchangedRows* rows = exchanged(x)) return *rows;
    auto [sent, fresh] = dispatched_.try_emplace(x);
    if (fresh) {
      const int group_sizes = rewriter_.map(n.inputs[2]);
      const std::vector<int> out = target().apply("moe_dispatch_exchange", {rewriter_.map(x), group_sizes},
                                                  group_attrs(), n.label + ".dispatch");
      own_value(out[0]);
      sent->second = {out[0], out[1], out[2], group_sizes};
    }
    return sent->second;
  }

  void grouped_gemm(const Node& n) {
    const Value& weight = rewriter_.source().value(n.inputs[1]);
    if (weight.kind != ValueKind::Param || !plan_.stacked_over_experts(weight.name)) {
      refuse(n, fmt::format("multiplies by '{}', which the family does not stack over the experts", weight.name));
    }
    const ExchangedRows rows = dispatch(n);
    const int out =
        target().apply1(n.op, {rows.rows, rewriter_.map(n.inputs[1]), rows.local_sizes}, n.attrs, n.label);
    rewriter_.set_resized(n.outputs[0], out);
    own_value(out);
    exchanged_[n.outputs[0]] = {out, rows.local_sizes, rows.received, rows.group_sizes};
  }

  void elementwise(const Node& n) {
    const ExchangedRows* rows = exchanged(n.inputs[0]);
    std::vector<int> inputs;
    for (int input : n.inputs) {
      if (!rows || !exchanged(input) || exchanged(input)->received != rows->received) {
        refuse(n, "combines the experts' rows with values in another order");
      }
      inputs.push_back(rewriter_.map(input));
    }
    const std::vector<int> outputs = target().apply(n.op, inputs, n.attrs, n.label);
    for (size_t o = 0; o < outputs.size(); ++o) {
      rewriter_.set_resized(n.outputs[o], outputs[o]);
      own_value(outputs[o]);
      exchanged_[n.outputs[o]] = {outputs[o], rows->local_sizes, rows->received, rows->group_sizes};
    }
  }

  // The experts' outputs go back to the rows they came from; the combine then reads them as without ep.
  void combine(const Node& n) {
    const ExchangedRows rows = *exchanged(n.inputs[0]);
    const int returned = target().apply1("moe_return_exchange", {rows.rows, rows.group_sizes, rows.received},
                                         group_attrs(), n.label + ".return");
    own_value(returned);
    std::vector<int> inputs{returned};
    for (size_t i = 1; i < n.inputs.size(); ++i) inputs.push_back(rewriter_.map(n.inputs[i]));
    const std::vector<int> outputs = target().apply(n.op, inputs, n.attrs, n.label);
    for (size_t o = 0; o < outputs.size(); ++o) rewriter_.set(n.outputs[o], outputs[o]);
  }

  // A value in the experts' order on this rank: no value of the whole model is these rows.
  void own_value(int value) {
    layouts_[value] = ValueLayout{.shape = target().value(value).meta.shape, .of_whole_model = false};
  }

  [[noreturn]] void refuse(const Node& n, const std::string& why) const {
    fail("expert parallelism (parallel.ep = {}): node '{}' (op '{}') {}", ep_.degree, n.label, n.op, why);
  }

  const ShardingPlan& plan_;
  ExpertParallelRank ep_;
  GraphRewriter rewriter_;
  std::map<int, ExchangedRows> exchanged_;   // by source value: values computed in the experts' order
  std::map<int, ExchangedRows> dispatched_;  // by source value in moe_permute's order: its rows, exchanged
  ValueLayouts layouts_;
};

std::optional<ParallelForward> split_experts(const Graph& forward, const DimensionPassInput& input) {
  if (input.layout.ep.degree <= 1) return std::nullopt;
  return parallelize_experts(forward, input.plan, input.layout.ep);
}

// Each stacked expert weight: rank r holds its experts [r E / P, (r + 1) E / P); the rest replicated.
std::vector<ParameterPlacement> place_experts(const PlacementInput& input) {
  const ShardingPlan plan = model_family(input.model).sharding_plan();
  std::vector<ParameterPlacement> placements(input.specs.size());
  if (input.degree <= 1) return placements;
  for (size_t i = 0; i < input.specs.size(); ++i) {
    const ParamSpec& spec = input.specs[i];
    if (!plan.stacked_over_experts(spec.name)) continue;
    check_divides(spec.name, spec.shape, input.degree);
    for (int r = 0; r < input.degree; ++r) {
      placements[i].shards.push_back({{experts_box(spec.shape, input.degree, r), std::vector<int64_t>(spec.shape.size(), 0)}});
    }
  }
  return placements;
}

void locate(RankLayout& layout, const RankPosition& position) {
  layout.ep = {.degree = position.degree, .rank = position.coordinate, .group = expert_parallel_dimension().name};
}

void check_settings(const ParallelSettings& settings, const ModelConfig& model) {
  const int64_t ep = settings.ep;
  check_positive("parallel.ep", ep);
  if (ep > 1 && model.num_experts == 0) {
    fail("key 'parallel.ep' ({}) needs a mixture-of-experts model (model.num_experts > 0): it splits the experts", ep);
  }
  if (model.num_experts % ep != 0) {
    fail("key 'parallel.ep' ({}) must divide model.num_experts ({}): each expert-parallel rank holds whole experts", ep,
         model.num_experts);
  }
}

std::string summarize(const DimensionSummaryInput& input) {
  return fmt::format("expert parallel: {} ranks, {} experts of every MoE layer each (whole experts), tokens "
                     "exchanged with the ranks holding their experts (all-to-all-v, counts first); each rank runs "
                     "its own micro-batches, as a data-parallel replica of the dense layers\n",
                     input.degree, input.model.num_experts / input.degree);
}

}  // namespace

ParallelForward parallelize_experts(const Graph& forward, const ShardingPlan& plan, const ExpertParallelRank& ep) {
  return ExpertParallelPass(forward, plan, ep).run();
}

ParallelDimension expert_parallel_dimension() {
  return {.name = "ep",
          .nesting = 1,
          .splits_batch = true,
          .named_when_set_only = true,
          .pass = split_experts,
          .place = place_experts,
          .locate = locate,
          .summarize = summarize,
          .keys = {settings_key<&ExpertParallelSettings::ep>("ep")},
          .check = check_settings};
}

}  // namespace strata
