#include "graph/recompute.h"

#include <charconv>

namespace strata {

namespace {

// Which source values the backward pass reads from clones instead of the
// forward originals.
std::vector<bool> values_to_recompute(const Graph& graph, int first_backward_node, RecomputeMode mode,
                                      const SegmentOf& segment_of) {
  std::vector<bool> recomputed(static_cast<size_t>(graph.num_values()), false);
  if (mode == RecomputeMode::None) return recomputed;
  std::vector<int> segment(static_cast<size_t>(first_backward_node));
  for (int id = 0; id < first_backward_node; ++id) segment[static_cast<size_t>(id)] = segment_of(graph.node(id));
  for (int id = 0; id < first_backward_node; ++id) {
    const Node& node = graph.node(id);
    bool in_segment = segment[static_cast<size_t>(id)] >= 0;
    bool chosen = in_segment && (mode == RecomputeMode::Full || OpRegistry::global().get(node.op).recomputed_selectively);
    if (chosen) {
      for (int output : node.outputs) recomputed[static_cast<size_t>(output)] = true;
    }
  }
  // A value read by a forward node of another segment is the state entering
  // that segment: it is kept, so recomputation never crosses segments.
  for (int id = 0; id < first_backward_node; ++id) {
    for (int input : graph.node(id).inputs) {
      int producer = graph.value(input).producer;
      if (producer >= 0 && segment[static_cast<size_t>(producer)] != segment[static_cast<size_t>(id)]) {
        recomputed[static_cast<size_t>(input)] = false;
      }
    }
  }
  return recomputed;
}

class Recomputation {
 public:
  Recomputation(GraphRewriter& rewriter, std::vector<bool> recomputed)
      : rewriter_(rewriter),
        recomputed_(std::move(recomputed)),
        clone_of_(static_cast<size_t>(rewriter.source().num_values()), -1) {}

  // The value a backward node reads in place of source value `value`.
  int backward_input(int value) { return recomputed_[static_cast<size_t>(value)] ? clone(value) : rewriter_.map(value); }

 private:
  // Emits the producer's clone (and, first, clones of its recomputed inputs)
  // on first use.
  int clone(int value) {
    if (clone_of_[static_cast<size_t>(value)] < 0) {
      const Node& node = rewriter_.source().node(rewriter_.source().value(value).producer);
      std::vector<int> inputs;
      for (int input : node.inputs) inputs.push_back(backward_input(input));
      std::vector<int> outputs = rewriter_.target().apply(node.op, inputs, node.attrs, node.label + ".recompute");
      for (size_t i = 0; i < outputs.size(); ++i) clone_of_[static_cast<size_t>(node.outputs[i])] = outputs[i];
    }
    return clone_of_[static_cast<size_t>(value)];
  }

  GraphRewriter& rewriter_;
  std::vector<bool> recomputed_;
  std::vector<int> clone_of_;
};

}  // namespace

RecomputeMode parse_recompute_mode(std::string_view text, std::string_view key) {
  if (text == "none") return RecomputeMode::None;
  if (text == "selective") return RecomputeMode::Selective;
  if (text == "full") return RecomputeMode::Full;
  fail("{} must be \"none\", \"selective\" or \"full\", got \"{}\"", key, text);
}

std::string_view recompute_mode_name(RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::None: return "none";
    case RecomputeMode::Selective: return "selective";
    case RecomputeMode::Full: return "full";
  }
  return "?";
}

SegmentOf segment_by_label_prefix(std::string prefix) {
  return [prefix = std::move(prefix)](const Node& node) {
    const std::string& label = node.label;
    if (label.compare(0, prefix.size(), prefix) != 0) return -1;
    const char* begin = label.data() + prefix.size();
    const char* end = label.data() + label.size();
    int index = -1;
    auto [rest, error] = std::from_chars(begin, end, index);
    if (error != std::errc() || rest == begin || index < 0 || (rest != end && *rest != '.')) return -1;
    return index;
  };
}

GraphRewriter::Result recompute_activations(const Graph& graph, int first_backward_node, RecomputeMode mode,
                                            const SegmentOf& segment_of) {
  STRATA_CHECK(first_backward_node >= 0 && first_backward_node <= graph.num_nodes(),
               "recompute: first backward node {} outside the graph's {} nodes", first_backward_node,
               graph.num_nodes());
  GraphRewriter rewriter(graph);
  for (int id = 0; id < first_backward_node; ++id) rewriter.copy_node(id);
  Recomputation recomputation(rewriter, values_to_recompute(graph, first_backward_node, mode, segment_of));
  for (int id = first_backward_node; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    std::vector<int> inputs;
    for (int input : node.inputs) inputs.push_back(recomputation.backward_input(input));
    std::vector<int> outputs = rewriter.target().apply(node.op, inputs, node.attrs, node.label);
    for (size_t i = 0; i < outputs.size(); ++i) rewriter.set(node.outputs[i], outputs[i]);
  }
  return std::move(rewriter).finish();
}

}  // namespace strata
