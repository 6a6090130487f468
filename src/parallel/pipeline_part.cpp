#include "parallel/pipeline_part.h"

#include <cctype>
#include <optional>
#include <set>

#include "core/error.h"

namespace strata {

namespace {

// The layer of a node labelled "<prefix><i>." or "<prefix><i>" (and anything after).
std::optional<int> layer_of(const Node& node, const std::string& prefix) {
  if (node.label.rfind(prefix, 0) != 0) return std::nullopt;
  size_t end = prefix.size();
  while (end < node.label.size() && std::isdigit(static_cast<unsigned char>(node.label[end]))) ++end;
  if (end == prefix.size()) return std::nullopt;
  return std::stoi(node.label.substr(prefix.size(), end - prefix.size()));
}

// The part every node belongs to: its layer's, or the first (before every layer) or the last (after).
std::vector<int> parts_of_nodes(const Graph& graph, const std::string& prefix, const std::vector<PipelinePart>& all) {
  const int last = static_cast<int>(all.size()) - 1;
  std::vector<int> owner;
  bool seen_layer = false;
  const Node* after_layers = nullptr;  // the first op outside every layer after one
  for (const Node& node : graph.nodes()) {
    std::optional<int> layer = layer_of(node, prefix);
    if (!layer) {
      owner.push_back(seen_layer ? last : 0);
      if (seen_layer && !after_layers) after_layers = &node;
      continue;
    }
    if (after_layers) {
      fail("pipeline parallelism: node '{}' (op '{}') is outside every layer but runs between layers",
           after_layers->label, after_layers->op);
    }
    seen_layer = true;
    int index = 0;
    while (index < last && *layer >= all[static_cast<size_t>(index)].end_layer) ++index;
    owner.push_back(index);
  }
  return owner;
}

}  // namespace

PipelinePart pipeline_part(int index, int parts, int layers) {
  STRATA_CHECK(parts >= 1 && parts <= layers && index >= 0 && index < parts, "part {} of {} over {} layers", index,
               parts, layers);
  const int base = layers / parts, extra = layers % parts;
  const int first = index * base + std::min(index, extra);
  return {index, parts, first, first + base + (index < extra ? 1 : 0)};
}

ParallelForward cut_pipeline_part(const Graph& forward, const PipelinePart& part, const std::string& layer_prefix) {
  // Every part's layers, by the same rule over the model's layers (counted from the labels).
  int layers = 0;
  for (const Node& node : forward.nodes()) {
    if (std::optional<int> layer = layer_of(node, layer_prefix)) layers = std::max(layers, *layer + 1);
  }
  std::vector<PipelinePart> all;
  for (int i = 0; i < part.parts; ++i) all.push_back(pipeline_part(i, part.parts, layers));
  STRATA_CHECK(all[static_cast<size_t>(part.index)].first_layer == part.first_layer &&
                   all[static_cast<size_t>(part.index)].end_layer == part.end_layer,
               "pipeline part {} cut as layers [{}, {}), the model's {} layers give [{}, {})", part.index,
               part.first_layer, part.end_layer, layers, all[static_cast<size_t>(part.index)].first_layer,
               all[static_cast<size_t>(part.index)].end_layer);
  const std::vector<int> owner = parts_of_nodes(forward, layer_prefix, all);

  std::set<int> used;  // inputs and params the part's nodes read
  for (size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] != part.index) continue;
    for (int input : forward.nodes()[i].inputs) used.insert(input);
  }
  GraphRewriter rewriter(forward, {}, [&](int value) { return used.count(value) > 0; });
  ParallelForward result;
  int received_source = -1, sent_source = -1;
  for (size_t i = 0; i < owner.size(); ++i) {
    const Node& node = forward.nodes()[i];
    if (owner[i] == part.index) {
      for (int input : node.inputs) {
        if (rewriter.is_mapped(input) || forward.value(input).kind != ValueKind::Intermediate) continue;
        if (received_source >= 0 && received_source != input) {
          fail("pipeline parallelism: part {} would receive both '{}' and '{}' (node '{}'): a stage boundary "
               "carries one activation",
               part.index, forward.value(received_source).name, forward.value(input).name, node.label);
        }
        received_source = input;
        result.received = rewriter.target().add_input("pipeline.received", forward.value(input).meta);
        rewriter.set(input, result.received);
      }
      rewriter.copy_node(static_cast<int>(i));
    } else if (owner[i] > part.index) {
      for (int input : node.inputs) {
        const int producer = forward.value(input).producer;
        if (producer < 0 || owner[static_cast<size_t>(producer)] != part.index) continue;
        if (sent_source >= 0 && sent_source != input) {
          fail("pipeline parallelism: part {} would send both '{}' and '{}' (node '{}'): a stage boundary carries "
               "one activation",
               part.index, forward.value(sent_source).name, forward.value(input).name, node.label);
        }
        sent_source = input;
      }
    }
  }
  result.rewritten = std::move(rewriter).finish();
  if (sent_source >= 0) result.sent = result.rewritten.value_map.at(static_cast<size_t>(sent_source));
  return result;
}

}  // namespace strata
