#pragma once
// Activation recomputation as a graph pass on a complete training graph
// (forward, then backward). Chosen forward nodes are cloned into the backward
// pass, each clone emitted just before the first backward node that needs one
// of its outputs, and the backward nodes read the clones: the forward
// originals then die at their last forward reader, so the memory planner
// reuses their bytes. Clones run the same op, attributes and inputs, so every
// value they make is bit-identical to the original.
#include <array>
#include <functional>
#include <string>
#include <string_view>

#include "graph/rewrite.h"

namespace strata {

enum class RecomputeMode {
  None,       // keep every activation the backward reads
  Selective,  // re-run the ops whose schema says recomputed_selectively (the attention core)
  Full,       // keep only what enters each segment; re-run the rest of it
};

inline constexpr std::array kRecomputeModes = {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full};
RecomputeMode parse_recompute_mode(std::string_view text, std::string_view key);  // errors name `key`
std::string_view recompute_mode_name(RecomputeMode mode);                          // "none", "selective", "full"


// The recomputation segment (for a transformer: its layer) of a forward node,
// or -1 for nodes outside every segment. Under `Full` a value made in a
// segment is kept only when a forward node of another segment (or of none)
// reads it: that is the state entering the next segment.
using SegmentOf = std::function<int(const Node& node)>;

// Segments from node labels "<prefix><index>." (or exactly "<prefix><index>"):
// with prefix "transformer.h.", "transformer.h.3.attn" is in segment 3.
SegmentOf segment_by_label_prefix(std::string prefix);

// `first_backward_node`: nodes before it are the forward pass. Recomputed
// nodes keep their label with ".recompute" appended. The result maps every
// source value to its forward original (never to a clone).
GraphRewriter::Result recompute_activations(const Graph& graph, int first_backward_node, RecomputeMode mode,
                                            const SegmentOf& segment_of);

}  // namespace strata
