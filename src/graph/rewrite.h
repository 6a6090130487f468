#pragma once
// Graph passes rebuild a graph node by node: the rewriter copies every input
// and param first, then the pass copies, replaces, drops or inserts nodes.
// Value ids change, so passes hand back the old-to-new map for the caller's
// handles (see GraphRewrite::map).
#include <functional>
#include <vector>

#include "graph/graph.h"

namespace strata {

class GraphRewriter {
 public:
  // The shape and dtype a param takes in the target (by default its own).
  using ParamMeta = std::function<TensorMeta(const Value& param)>;
  // Which inputs and params the target has (by default all; the others map to -1).
  using KeepValue = std::function<bool(int input_or_param)>;
  explicit GraphRewriter(const Graph& source, const ParamMeta& param_meta = {}, const KeepValue& keep = {});

  const Graph& source() const { return source_; }
  Graph& target() { return target_; }

  // New id of a source value; fails if the pass has not produced it yet.
  int map(int source_value) const;
  bool is_mapped(int source_value) const;
  // Records that `target_value` now stands for `source_value`; an intermediate takes its name.
  void set(int source_value, int target_value);
  // The same for a value of another shape: passes that change shapes (a
  // tensor-parallel rank holds a shard of each split value).
  void set_resized(int source_value, int target_value);
  // The same for a value of another dtype (the shape is the same), taking its name too: a
  // gradient kept narrow (narrow_gradients.h).
  void set_retyped(int source_value, int target_value);

  // Copies source node `node_id` with mapped inputs (and its label and attrs)
  // and maps its outputs; returns the new outputs.
  std::vector<int> copy_node(int node_id);

  // The finished graph and, per source value, its new id (-1 for values the
  // pass dropped).
  struct Result;
  Result finish() &&;

 private:
  void stand_for(int source_value, int target_value);  // maps it, and an intermediate takes its name

  const Graph& source_;
  Graph target_;
  std::vector<int> map_;
};

struct GraphRewriter::Result {
  Graph graph;
  std::vector<int> value_map;
  int operator()(int source_value) const;  // new id; fails for dropped values
};

// Two passes in a row: `second` rewrote `first`'s graph; the map spans both.
GraphRewriter::Result chain_rewrites(GraphRewriter::Result first, GraphRewriter::Result second);

}  // namespace strata
