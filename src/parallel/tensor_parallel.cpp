#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "ops/schema.h"
#include "ops/vocab_shard.h"

namespace strata {

namespace {

// Where a value's elements live across the tensor-parallel group.
enum class Placement {
  Replicated,    // all of it on every rank
  SplitColumns,  // a column-parallel weight or bias, or an activation split along its last dim (heads, features)
  SplitRows,     // a row-parallel weight
  SplitVocab,    // vocabulary rows of an embedding table, or vocabulary columns of the logits
  SplitSequence, // an activation [B, T, C] split along T (sequence parallelism)
};

// The sequence axis of an activation: [B, T, C] or [T, C] (position embeddings).
int64_t sequence_axis(const Shape& shape) { return static_cast<int64_t>(shape.size()) - 2; }

class TensorParallelPass {
 public:
  TensorParallelPass(const Graph& forward, const ShardingPlan& plan, const TensorParallelRank& tp)
      : tp_(tp), rewriter_(forward, [&](const Value& param) {
          shards_.emplace(param.name, ParameterShard(param.name, param.meta.shape, plan.rule_for(param.name), tp));
          return TensorMeta{shards_.at(param.name).shape(), param.meta.dtype};
        }) {
    for (int id = 0; id < forward.num_values(); ++id) {
      const Value& value = forward.value(id);
      if (value.kind != ValueKind::Param) continue;
      const ParameterShard& shard = shards_.at(value.name);
      placement_[id] = placement_of(shard);
      parts_[id] = shard.layout().parts;
      layouts_[rewriter_.map(id)] = shard.layout();
    }
  }

  TensorParallelForward run() && {
    const Graph& source = rewriter_.source();
    for (int id = 0; id < source.num_nodes(); ++id) place_node(id);
    return {std::move(rewriter_).finish(), std::move(layouts_), std::move(gradient_labels_)};
  }

 private:
  static Placement placement_of(const ParameterShard& shard) {
    if (!shard.split()) return Placement::Replicated;
    switch (shard.style()) {
      case ShardStyle::ColumnParallel: return Placement::SplitColumns;
      case ShardStyle::RowParallel: return Placement::SplitRows;
      case ShardStyle::VocabParallel: return Placement::SplitVocab;
      case ShardStyle::Replicated: break;
    }
    return Placement::Replicated;
  }

  Placement placement(int source_value) const {
    auto found = placement_.find(source_value);
    return found == placement_.end() ? Placement::Replicated : found->second;
  }

  Attrs group_attrs() const { return {{"group", tp_.group}, {"ranks", int64_t{tp_.degree}}}; }
  // Along the sequence axis of target value `value`.
  Attrs sequence_attrs(int value) {
    Attrs attrs = group_attrs();
    attrs.set("dim", sequence_axis(target().value(value).meta.shape));
    return attrs;
  }

  Graph& target() { return rewriter_.target(); }
  const Node& node(int id) const { return rewriter_.source().node(id); }

  // Maps the node's outputs to `outputs`, each with placement `where` (split values: of `parts`
  // fused parts, c_attn's q, k and v), and gives them the whole model's names.
  void produce(const Node& n, const std::vector<int>& outputs, Placement where, int64_t parts = 1) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      const int source = n.outputs[i], made = outputs[i];
      rewriter_.set_resized(source, made);
      placement_[source] = where;
      parts_[source] = parts;
      target().rename_value(made, rewriter_.source().value(source).name);
      ValueLayout& layout = layouts_[made] = ValueLayout{};  // made for the source value, whatever made it
      layout.shape = target().value(made).meta.shape;
      if (where == Placement::Replicated) continue;
      const Shape& whole = rewriter_.source().value(source).meta.shape;
      layout.kind = ValueLayout::Kind::Split;
      layout.group = tp_.group;
      layout.dim = static_cast<int64_t>(std::mismatch(whole.begin(), whole.end(), layout.shape.begin()).first - whole.begin());
      STRATA_CHECK(layout.dim < static_cast<int64_t>(whole.size()), "tensor parallelism: split value '{}' of whole shape {}",
                   target().value(made).name, shape_str(whole));
      layout.parts = parts;
    }
  }

  int64_t parts_of(int source_value) const {
    auto found = parts_.find(source_value);
    return found == parts_.end() ? 1 : found->second;
  }

  // A value the pass makes for its collectives: laid out as `kind` (along the sequence when split),
  // standing for no value of the whole model.
  int own_value(int value, ValueLayout::Kind kind) {
    ValueLayout& layout = layouts_[value];
    layout.kind = kind;
    layout.group = kind == ValueLayout::Kind::Whole ? "" : tp_.group;
    layout.shape = target().value(value).meta.shape;
    if (kind == ValueLayout::Kind::Split) layout.dim = sequence_axis(layout.shape);
    layout.of_whole_model = false;
    return value;
  }

  // A rank's term of a value, which a reduction sums: named apart from the sum, which takes the name.
  int partial(int value) {
    target().rename_value(value, target().value(value).name + ".partial");
    return own_value(value, ValueLayout::Kind::Partial);
  }

  [[noreturn]] void refuse(const Node& n, const std::string& why) const {
    fail("tensor parallelism (parallel.tp = {}): node '{}' (op '{}') {}", tp_.degree, n.label, n.op, why);
  }

  bool reads(const Node& n, Placement where) const {
    return std::any_of(n.inputs.begin(), n.inputs.end(), [&](int input) { return placement(input) == where; });
  }
  bool reads_only(const Node& n, Placement where) const {
    return std::all_of(n.inputs.begin(), n.inputs.end(), [&](int input) { return placement(input) == where; });
  }

  // The op's placement rule (ops/placement_rule.h) picks the transform.
  void place_node(int id) {
    const Node& n = node(id);
    if (reads_only(n, Placement::Replicated)) {
      rewriter_.copy_node(id);
      return;
    }
    const PlacementRule rule = OpRegistry::global().get(n.op).placement;
    if (reads(n, Placement::SplitSequence) && passes_sequence_split(rule)) return sequence_region(n);
    if (reads(n, Placement::SplitSequence) && rule == PlacementRule::WholeSequence) return whole_sequence(n);
    switch (rule) {
      case PlacementRule::Linear:
        if (placement(n.inputs[1]) == Placement::SplitColumns) return column_linear(n);
        if (placement(n.inputs[1]) == Placement::SplitRows) return row_linear(n);
        if (positionwise_replicated(n)) return sequence_region(n);
        break;
      case PlacementRule::Matmul:
        if (placement(n.inputs[1]) == Placement::SplitVocab) return vocab_head(n);
        if (placement(n.inputs[1]) == Placement::SplitColumns) return column_matmul(n);
        if (placement(n.inputs[1]) == Placement::SplitRows) return row_matmul(n);
        if (positionwise_replicated(n)) return sequence_region(n);
        break;
      case PlacementRule::AttentionByHeads:
        if (reads_only(n, Placement::SplitColumns)) return local_heads(n);
        break;
      case PlacementRule::RotaryByHeads:
        if (placement(n.inputs[0]) == Placement::SplitColumns && placement(n.inputs[1]) == Placement::Replicated) {
          return elementwise(n, Placement::SplitColumns);
        }
        break;
      case PlacementRule::VocabLookup:
        if (placement(n.inputs[0]) == Placement::SplitVocab) return vocab_embedding(n);
        break;
      case PlacementRule::VocabLoss:
        if (placement(n.inputs[0]) == Placement::SplitVocab) return vocab_loss(n);
        break;
      case PlacementRule::Elementwise:
        if (n.inputs.size() == 1) return elementwise(n, placement(n.inputs[0]));
        if (reads_only(n, Placement::SplitColumns)) return elementwise(n, Placement::SplitColumns);
        break;
      case PlacementRule::RowwiseNorm:
      case PlacementRule::ExpertGroups:
      case PlacementRule::ExpertCombine:
      case PlacementRule::WholeSequence:
      case PlacementRule::None:
      case PlacementRule::Unstated:
        break;
    }
    refuse_placement(n, rule);
  }

  [[noreturn]] void refuse_placement(const Node& n, PlacementRule rule) const {
    const std::string split =
        reads(n, Placement::SplitSequence) ? "a value split along the sequence (parallel.sp)" : "a split value";
    if (rule == PlacementRule::None || rule == PlacementRule::Unstated) {
      refuse(n, fmt::format("reads {}, and its op has no placement rule", split));
    }
    refuse(n, fmt::format("reads {} in a way its op's placement rule ({}) does not place", split,
                          placement_rule_name(rule)));
  }

  std::vector<int> inputs_of(const Node& n) const {
    std::vector<int> inputs;
    for (int input : n.inputs) inputs.push_back(rewriter_.map(input));
    return inputs;
  }

  void elementwise(const Node& n, Placement where) {
    if (auto table = logits_table_.find(n.inputs[0]); table != logits_table_.end()) {
      logits_table_[n.outputs[0]] = table->second;  // cast logits
    }
    produce(n, target().apply(n.op, inputs_of(n), n.attrs, n.label), where, parts_of(n.inputs[0]));
  }

  int copy_to_group(int value, const std::string& label) {
    return own_value(target().apply1("copy_to_group", {value}, group_attrs(), label + ".copy_to_tp"),
                     ValueLayout::Kind::Whole);
  }

  int all_reduce(int value, const std::string& label) {
    return own_value(target().apply1("all_reduce", {value}, group_attrs(), label + ".all_reduce_tp"),
                     ValueLayout::Kind::Whole);
  }

  // Entering a split layer: the whole input on every rank (copied in, or gathered along the sequence).
  int enter_split(int source_value, int value, const std::string& label) {
    if (placement(source_value) != Placement::SplitSequence) return copy_to_group(value, label);
    return own_value(target().apply1("all_gather", {value}, sequence_attrs(value), label + ".all_gather_tp"),
                     ValueLayout::Kind::Whole);
  }

  // Leaving a split layer: the sum of the ranks' partial values, whole or this rank's block of the sequence.
  std::pair<int, Placement> leave_split(int partial, const std::string& label) {
    if (!tp_.sequence_parallel) return {all_reduce(partial, label), Placement::Replicated};
    const int64_t length = target().value(partial).meta.shape[static_cast<size_t>(
        sequence_axis(target().value(partial).meta.shape))];
    if (length % tp_.degree != 0) {
      fail("sequence parallelism: node '{}' has a sequence of {}, which parallel.tp = {} does not divide", label,
           length, tp_.degree);
    }
    return {own_value(target().apply1("reduce_scatter", {partial}, sequence_attrs(partial), label + ".reduce_scatter_tp"),
                      ValueLayout::Kind::Split),
            Placement::SplitSequence};
  }

  // The parameter a value is, or is a cast of (-1 for any other value).
  int param_behind(int source_value) const {
    const Graph& source = rewriter_.source();
    while (source.value(source_value).kind == ValueKind::Intermediate) {
      const Node& producer = source.node(source.value(source_value).producer);
      if (producer.op != "cast") return -1;
      source_value = producer.inputs[0];
    }
    return source.value(source_value).kind == ValueKind::Param ? source_value : -1;
  }

  // An op whose rule passes a sequence split, reading a sequence-split value: replicated parameters
  // enter through copy_to_group (each rank's gradient covers its positions only: they are summed),
  // other replicated values (position embeddings) are split along the sequence.
  void sequence_region(const Node& n) {
    std::vector<int> inputs = inputs_of(n);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int source_input = n.inputs[i];
      if (placement(source_input) == Placement::SplitSequence) continue;
      if (placement(source_input) != Placement::Replicated) refuse(n, "mixes sequence-split and split values");
      if (param_behind(source_input) >= 0) {
        inputs[i] = copy_to_group(inputs[i], n.label);
      } else {
        inputs[i] = own_value(
            target().apply1("split_to_group", {inputs[i]}, sequence_attrs(inputs[i]), n.label + ".split_tp"),
            ValueLayout::Kind::Split);
      }
    }
    produce(n, target().apply(n.op, inputs, n.attrs, n.label), Placement::SplitSequence);
  }

  // Each position times replicated weights (a router's gate, a shared expert's linears): the positions
  // stay split, the weights read through copy_to_group.
  bool positionwise_replicated(const Node& n) const {
    return placement(n.inputs[0]) == Placement::SplitSequence &&
           std::all_of(n.inputs.begin() + 1, n.inputs.end(),
                       [&](int input) { return placement(input) == Placement::Replicated; });
  }

  // The op reads every position: its sequence-split inputs gathered whole (once each), it runs alike
  // on every rank, and so do the ops after it that read only whole values.
  void whole_sequence(const Node& n) {
    std::vector<int> inputs = inputs_of(n);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int source_input = n.inputs[i];
      if (placement(source_input) == Placement::Replicated) continue;
      if (placement(source_input) != Placement::SplitSequence) refuse(n, "reads a value split by features");
      auto [gathered, fresh] = gathered_.try_emplace(source_input, -1);
      if (fresh) {
        gathered->second = own_value(target().apply1("gather_to_group", {inputs[i]}, sequence_attrs(inputs[i]),
                                                     n.label + ".gather_tp"),
                                     ValueLayout::Kind::Whole);
      }
      inputs[i] = gathered->second;
    }
    produce(n, target().apply(n.op, inputs, n.attrs, n.label), Placement::Replicated);
  }

  void column_linear(const Node& n) {
    if (placement(n.inputs[0]) != Placement::Replicated && placement(n.inputs[0]) != Placement::SplitSequence) {
      refuse(n, "is column-parallel but its input is split");
    }
    if (placement(n.inputs[2]) != Placement::SplitColumns) refuse(n, "is column-parallel but its bias is not");
    std::vector<int> inputs = inputs_of(n);
    inputs[0] = enter_split(n.inputs[0], inputs[0], n.label);
    produce(n, target().apply("linear", inputs, n.attrs, n.label), Placement::SplitColumns, parts_of(n.inputs[1]));
  }

  void row_linear(const Node& n) {
    if (placement(n.inputs[0]) != Placement::SplitColumns) refuse(n, "is row-parallel but its input is not split");
    if (placement(n.inputs[2]) != Placement::Replicated) refuse(n, "is row-parallel but its bias is split");
    std::vector<int> inputs = inputs_of(n);
    int partial = this->partial(
        target().apply1("matmul", {inputs[0], inputs[1]}, {{"trans_a", false}, {"trans_b", false}}, n.label));
    // The bias joins after the sum, so it is added once, not once per rank.
    auto [sum, where] = leave_split(partial, n.label);
    int bias = where == Placement::SplitSequence ? copy_to_group(inputs[2], n.label + ".bias") : inputs[2];
    produce(n, {target().apply1("add", {sum, bias}, {}, n.label + ".bias")}, where);
    // Gradients are labelled "<node>.grad_<input>": the matmul's and the add's inputs stand for the linear's.
    const OpRegistry& ops = OpRegistry::global();
    const std::vector<std::string>& linear = ops.get(n.op).inputs;
    const std::vector<std::string>& matmul = ops.get("matmul").inputs;
    const std::vector<std::string>& add = ops.get("add").inputs;
    for (size_t i = 0; i < 2; ++i) gradient_labels_[n.label + ".grad_" + matmul[i]] = n.label + ".grad_" + linear[i];
    gradient_labels_[n.label + ".bias.grad_" + add[1]] = n.label + ".grad_" + linear[2];
  }

  // An nn.Linear-layout projection, x W^T with W [out, in] split by output rows.
  void column_matmul(const Node& n) {
    if (!n.attrs.get_bool("trans_b") || n.attrs.get_bool("trans_a")) {
      refuse(n, "multiplies by a column-parallel weight other than as x W^T");
    }
    if (placement(n.inputs[0]) != Placement::Replicated && placement(n.inputs[0]) != Placement::SplitSequence) {
      refuse(n, "is column-parallel but its input is split");
    }
    std::vector<int> inputs = inputs_of(n);
    inputs[0] = enter_split(n.inputs[0], inputs[0], n.label);
    produce(n, target().apply("matmul", inputs, n.attrs, n.label), Placement::SplitColumns, parts_of(n.inputs[1]));
  }

  // x W^T with W [out, in] split by input columns: partial products, summed over the ranks.
  void row_matmul(const Node& n) {
    if (!n.attrs.get_bool("trans_b") || n.attrs.get_bool("trans_a")) {
      refuse(n, "multiplies by a row-parallel weight other than as x W^T");
    }
    if (placement(n.inputs[0]) != Placement::SplitColumns) refuse(n, "is row-parallel but its input is not split");
    int partial = this->partial(target().apply1("matmul", inputs_of(n), n.attrs, n.label));
    auto [sum, where] = leave_split(partial, n.label);
    produce(n, {sum}, where);
  }

  // Attention over this rank's whole heads: query heads, and for grouped attention its kv heads.
  void local_heads(const Node& n) {
    Attrs attrs = n.attrs;
    for (const char* key : {"n_head", "n_kv_head"}) {
      if (!n.attrs.has(key)) continue;
      const int64_t heads = n.attrs.get_int(key);
      if (heads % tp_.degree != 0) {
        refuse(n, fmt::format("has {} {} heads, which parallel.tp = {} does not divide", heads,
                              std::string_view(key) == "n_head" ? "query" : "key/value", tp_.degree));
      }
      attrs.set(key, heads / tp_.degree);
    }
    produce(n, target().apply(n.op, inputs_of(n), attrs, n.label), Placement::SplitColumns);
  }

  VocabShard vocab_of(int table) const {
    const ParameterShard& shard = shards_.at(rewriter_.source().value(table).name);
    return {shard.first_row(), shard.shape()[0], shard.full_shape()[0]};
  }

  // The parameter behind a (possibly cast) vocab-parallel value.
  int vocab_table(int value) const {
    const int table = param_behind(value);
    STRATA_CHECK(table >= 0, "vocab-parallel value '{}' is not a parameter or a cast of one",
                 rewriter_.source().value(value).name);
    return table;
  }

  void vocab_embedding(const Node& n) {
    Attrs attrs = n.attrs;
    set_vocab_shard(attrs, vocab_of(vocab_table(n.inputs[0])));
    int partial = this->partial(target().apply1("embedding", inputs_of(n), attrs, n.label));
    auto [sum, where] = leave_split(partial, n.label);
    produce(n, {sum}, where);
  }

  void vocab_head(const Node& n) {
    if (!n.attrs.get_bool("trans_b") || n.attrs.get_bool("trans_a")) {
      refuse(n, "multiplies by a vocab-parallel table other than as the tied LM head (a b^T)");
    }
    if (placement(n.inputs[0]) != Placement::Replicated && placement(n.inputs[0]) != Placement::SplitSequence) {
      refuse(n, "is the LM head but its input is split");
    }
    std::vector<int> inputs = inputs_of(n);
    inputs[0] = enter_split(n.inputs[0], inputs[0], n.label);
    logits_table_[n.outputs[0]] = vocab_table(n.inputs[1]);
    produce(n, target().apply(n.op, inputs, n.attrs, n.label), Placement::SplitVocab);
  }

  void vocab_loss(const Node& n) {
    auto table = logits_table_.find(n.inputs[0]);
    if (table == logits_table_.end()) refuse(n, "reads vocabulary-split logits not made by the LM head");
    Attrs attrs = group_attrs();
    set_vocab_shard(attrs, vocab_of(table->second));
    produce(n, target().apply(n.op, inputs_of(n), attrs, n.label), Placement::Replicated);
  }

  TensorParallelRank tp_;
  std::map<std::string, ParameterShard> shards_;  // filled while the rewriter copies the params
  GraphRewriter rewriter_;
  std::map<int, Placement> placement_;  // of source values; absent: replicated
  std::map<int, int> logits_table_;     // vocabulary-split logits -> the table that made them
  std::map<int, int64_t> parts_;        // of split source values: their fused parts (absent: 1)
  std::map<int, int> gathered_;         // sequence-split source values gathered whole: their target values
  ValueLayouts layouts_;                // of target values
  std::map<std::string, std::string> gradient_labels_;
};

}  // namespace

TensorParallelForward parallelize_tensors(const Graph& forward, const ShardingPlan& plan, const TensorParallelRank& tp) {
  return TensorParallelPass(forward, plan, tp).run();
}

}  // namespace strata
