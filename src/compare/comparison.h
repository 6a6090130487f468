#pragma once
// Two runs' tensors matched by name and judged: the baseline's (side a, or a
// golden dump) are held, the candidate's (side b) are compared as its run
// makes them and dropped. Then the first divergent op: the earliest tensor in
// the candidate's execution order that fails while everything its op read
// passes (reading through tensors one side lacks, such as inserted casts or a
// fusion's intermediates, to the nearest compared ones; graph inputs and
// parameters count as passing), so the blame lands on one op.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compare/capture.h"
#include "compare/metrics.h"
#include "compare/tolerance.h"
#include "compare/truth.h"

namespace strata {

enum class TensorStatus { Pass, Fail, ShapeMismatch, OnlyBaseline, OnlyCandidate };
std::string_view status_name(TensorStatus status);  // "pass", "FAIL", "SHAPE", "only a", "only b"

// What the truth re-run (truth.h) says of a tensor. Rounding: both sides within their op's bound and every
// input a rounding difference too (however far apart the two sides are); Inherited: both within bound, but
// an input upstream is faulty; Fault: a side out of bound (truth_a / truth_b say which); Unjudged: re-run
// asked for but impossible (no bound for the op, an input missing).
enum class Verdict { NotRerun, Unjudged, Rounding, Inherited, Fault };
std::string verdict_text(Verdict verdict, const SideJudgement& a, const SideJudgement& b);  // "fault on b", ...

// When to re-run an op in f64: never, or for every tensor a tolerance fails and one in eight that pass
// (chosen by name, so the same ones every time), or for every tensor.
enum class Rerun { None, Failing, All };
Rerun parse_rerun(const std::string& text);  // "none" | "failing" | "all"

struct ComparedTensor {
  std::string name;
  std::string op;  // the candidate's op type (the baseline's where only it has the tensor)
  TensorStatus status = TensorStatus::Pass;
  Shape shape_a, shape_b;
  DType dtype_a = DType::F32, dtype_b = DType::F32;
  TensorMetrics metrics;  // compared tensors only
  std::string group;      // the tolerance group that judged it
  Tolerance tolerance;
  double margin = 0;      // Tolerance::margin: above 1 fails
  Verdict verdict = Verdict::NotRerun;
  SideJudgement truth_a, truth_b;
  // Judged by a rule rather than a re-run: a step's loss or gradient norm against the spread of side a
  // re-run with its sums in another order, a parameter after steps against AdamW's amplification, a
  // parameter's gradient by its parts. The bound and the rule.
  double step_bound = 0;
  std::string step_rule;
  // A shape mismatch, a fault or what it caused, or a tolerance failure the truth did not clear.
  bool failed() const;
};

struct FirstDivergence {
  size_t tensor = 0;                // index into Comparison::tensors
  std::vector<size_t> inputs;       // the compared tensors its op read (nearest ones), all passing
};

struct Comparison {
  std::vector<ComparedTensor> tensors;  // the candidate's execution order, then those only the baseline has
  std::optional<FirstDivergence> first_divergence;
  bool truth_available = false;  // side a ran here, so ops could be re-run (truth.h)
  std::string explanation;       // --explain's text, when asked
  bool failed() const;
};

class Comparator {
 public:
  // `report_candidate_only` false: tensors only the candidate has are not listed (a golden dump
  // holds a few layers' outputs), though the blame still reads through them.
  Comparator(ToleranceTable tolerances, bool report_candidate_only);

  // Re-runs ops against the truth (truth.h); side a's graph inputs and parameters must then be given
  // before its tensors. `explain`: a tensor whose judgement is written out in full.
  // `candidate_nodes`: side b runs in this process too (TruthJudge).
  void judge_against_truth(Rerun rerun, std::string explain, bool candidate_nodes);
  void add_graph_input(const std::string& name, const Tensor& value, bool side_b);
  // How far a step's loss or gradient norm ("step<N>.loss") moved when side a re-ran with its sums in
  // another order (compare_runs.h); a figure without one keeps its tolerance.
  void set_step_spread(std::map<std::string, double> spread) { step_spread_ = std::move(spread); }
  void add_baseline(CapturedTensor&& tensor);
  void add_candidate(CapturedTensor&& tensor);
  Comparison finish() &&;

 private:
  void judge(ComparedTensor& t, const CapturedTensor& b);
  void judge_step(ComparedTensor& t, DType a, DType b) const;  // the sides' precisions
  void judge_parameter(ComparedTensor& t, const CapturedTensor& a, const CapturedTensor& b) const;
  static void judged_by_rule(ComparedTensor& t, bool within);
  std::map<std::string, double> step_spread_;
  ToleranceTable tolerances_;
  bool report_candidate_only_;
  Rerun rerun_ = Rerun::None;
  std::unique_ptr<TruthJudge> truth_;
  std::string explain_, explanation_;
  std::map<std::string, CapturedTensor> baseline_;
  std::vector<std::string> baseline_order_;
  std::map<std::string, std::vector<std::string>> lineage_;  // the candidate's: name -> what its op read
  std::map<std::string, size_t> listed_;                      // name -> index in tensors
  std::vector<ComparedTensor> tensors_;
  std::vector<std::vector<std::string>> inputs_;              // per listed tensor (candidate's)
};

}  // namespace strata
