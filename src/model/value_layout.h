#pragma once
// How a rank's tensor of a named value stands to the whole model's value of
// the same name, as a parallel dimension's graph pass placed it (the
// tensor-parallel pass, parallel/tensor_parallel.h). `strata compare` reads it to put a layout's
// tensors back together before comparing them with another layout's.
#include <cstdint>
#include <map>
#include <string>

#include "graph/autodiff.h"
#include "graph/graph.h"

namespace strata {

struct ValueLayout {
  enum class Kind {
    Whole,    // every rank of the group holds all of it
    Split,    // rank r holds its piece along `dim` (of each fused part): the pieces, in rank order, make it
    Partial,  // every rank holds a term of it: the sum over the group is the whole value
  };
  Kind kind = Kind::Whole;
  int64_t dim = 0;    // Split: the dim cut
  int64_t parts = 1;  // Split: fused parts along dim (c_attn's q, k and v), each cut into the group's pieces
  std::string group;  // Split, Partial: the parallel dimension whose ranks hold the pieces or the terms
  Shape shape;        // this rank's shape (a value of the same name but another shape is not this one)
  // False for a value the pass made for its own collectives (a partial sum before its reduction, a
  // copy into the group): it stands for no value of the whole model, and is not compared.
  bool of_whole_model = true;
};

// The tensor-parallel pass's layouts, by value id of the graph it made; a value without one is
// whole on every rank and a value of the whole model (an input, or a node the pass copied).
using ValueLayouts = std::map<int, ValueLayout>;

// A backward label ("<node>.grad_<input>") a rank's graph gives a gradient -> the label the whole
// model's graph gives it, where the pass replaced an op (a row-parallel linear becomes a matmul
// and a bias add).
using GradientLabels = std::map<std::string, std::string>;

// A rank's layouts by value name (names survive the passes after the backward pass: recomputation,
// fusion), for the values of the whole model: forward values and parameters, and the gradient
// each backward pass's term stands for. Empty without tensor parallelism.
struct LayoutRecord {
  std::map<std::string, ValueLayout> values;
  GradientLabels gradient_labels;
  bool empty() const { return values.empty(); }
};

// The record of `graph`, whose nodes before `first_backward_node` are the forward pass laid out by
// `forward`, and whose backward values come from `origins` (graph/autodiff.h).
LayoutRecord record_layouts(const Graph& graph, const ValueLayouts& forward, const GradientOrigins& origins,
                            int first_backward_node);

}  // namespace strata
