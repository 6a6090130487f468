#pragma once
// The high-precision truth of one op: its node re-run alone on the `ref` backend in f64 (floating inputs
// widened), once on side a's inputs and once on side b's, and each side's output judged against the
// truth of its own inputs by the op's error bound (op_bounds.h). So a side is faulty when its kernel's
// result is further from the exact result of the inputs it was given than any correct rounding allows,
// however far the two sides' inputs (and so their outputs) lie apart, and a long reduction that cancels
// is judged by the size of its terms rather than of its result.
//
// Side a must have run in this process (its node attributes and its graph inputs and parameters kept).
// Tensors are held by name, each side's once (the comparator's own copies, shared), and let go once
// every op that reads them has been judged: what is held at any time is what a training step keeps
// alive. A value side b lacks (a layout run sums a LLaMA norm's gradient where one process does not
// capture it) is rebuilt by re-running side a's node for it on side b's tensors, to a few levels.
// Everything is judged in the backward seed's units (each tensor times its factor; `d_loss` is then 1).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compare/capture.h"
#include "compare/op_bounds.h"
#include "ops/dispatcher.h"

namespace strata {

struct SideJudgement {
  bool judged = false;
  std::string unjudged_why;  // when not judged
  double max_error = 0;      // max |side - truth|
  double ratio = 0;          // max over elements of |side - truth| / bound: above 1 is out of bound
  int64_t worst = 0;         // the element with that ratio
  double side_at_worst = 0, truth_at_worst = 0, bound_at_worst = 0;
  double truth_scale = 0;    // max |truth|
  BoundTerms terms;
  std::vector<std::string> rebuilt;  // inputs side b lacked, rebuilt from side a's nodes
  bool within() const { return judged && ratio <= 1; }
};

class TruthJudge {
 public:
  // `candidate_nodes`: side b ran in this process too, so its tensors carry their nodes' attributes and
  // inputs and are re-run as its own graph computed them (its casts included); otherwise (a layout run's
  // whole tensors) side a's node is re-run on side b's values.
  explicit TruthJudge(bool candidate_nodes);
  ~TruthJudge();
  // A side's graph inputs and parameters (side b's, where given, else side a's are used for both), then
  // side a's tensors, before any of side b's.
  void add_graph_input(const std::string& name, const Tensor& value, bool side_b);
  void add_baseline(const CapturedTensor& a);
  // Side b's tensor, as it comes; then judge it if wanted; then done() lets go of what nobody still reads.
  void add_candidate(const CapturedTensor& b);
  bool can_judge(const std::string& name) const;
  SideJudgement judge(const std::string& name, bool side_b);
  void done(const std::string& name);
  // Figures of an op's inputs for --explain: "name [shape] dtype: max|a|, max|b|".
  std::string describe_inputs(const std::string& name) const;
  const Attrs* attrs_of(const std::string& name) const;

 private:
  struct Held {
    std::string op;
    Attrs attrs;
    std::vector<std::string> inputs;
    int output = 0;
    Tensor tensor;  // as the side stored it
    double factor = 1;
    int readers = 0;  // side a's tensors that read it and side b has not yet given
    bool given_by_b = false;
  };
  struct Side {
    std::map<std::string, Held> held;
    std::map<std::string, Tensor> graph_inputs;
  };
  // The value a side's kernel read, in the seed's units (f64, or the integers as they are).
  Tensor value_of(const std::string& name, bool side_b, int depth, std::vector<std::string>& rebuilt);
  const Tensor* stored(const std::string& name, bool side_b) const;
  const Held& node_of(const std::string& name, bool side_b) const;
  SideJudgement judge_node(const Held& node, const Held& output, bool side_b);
  Tensors rerun(const Held& node, const Tensors& inputs);
  void release(const std::string& name);

  std::unique_ptr<Dispatcher> ref_;
  bool candidate_nodes_;
  Side a_, b_;
};

}  // namespace strata
