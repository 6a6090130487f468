#pragma once
// Two runs' tensors matched by name and judged: the baseline's (side a, or a
// golden dump) are held, the candidate's (side b) are compared as its run
// makes them and dropped. Then the first divergent op: the earliest tensor in
// the candidate's execution order that fails while everything its op read
// passes (reading through tensors one side lacks, such as inserted casts or a
// fusion's intermediates, to the nearest compared ones; graph inputs and
// parameters count as passing), so the blame lands on one op.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compare/capture.h"
#include "compare/metrics.h"
#include "compare/tolerance.h"

namespace strata {

enum class TensorStatus { Pass, Fail, ShapeMismatch, OnlyBaseline, OnlyCandidate };
std::string_view status_name(TensorStatus status);  // "pass", "FAIL", "SHAPE", "only a", "only b"

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
  bool failed() const { return status == TensorStatus::Fail || status == TensorStatus::ShapeMismatch; }
};

struct FirstDivergence {
  size_t tensor = 0;                // index into Comparison::tensors
  std::vector<size_t> inputs;       // the compared tensors its op read (nearest ones), all passing
};

struct Comparison {
  std::vector<ComparedTensor> tensors;  // the candidate's execution order, then those only the baseline has
  std::optional<FirstDivergence> first_divergence;
  bool failed() const;
};

class Comparator {
 public:
  // `report_candidate_only` false: tensors only the candidate has are not listed (a golden dump
  // holds a few layers' outputs), though the blame still reads through them.
  Comparator(ToleranceTable tolerances, bool report_candidate_only);

  void add_baseline(CapturedTensor&& tensor);
  void add_candidate(CapturedTensor&& tensor);
  Comparison finish() &&;

 private:
  ToleranceTable tolerances_;
  bool report_candidate_only_;
  std::map<std::string, CapturedTensor> baseline_;
  std::vector<std::string> baseline_order_;
  std::map<std::string, std::vector<std::string>> lineage_;  // the candidate's: name -> what its op read
  std::map<std::string, size_t> listed_;                      // name -> index in tensors
  std::vector<ComparedTensor> tensors_;
  std::vector<std::vector<std::string>> inputs_;              // per listed tensor (candidate's)
};

}  // namespace strata
