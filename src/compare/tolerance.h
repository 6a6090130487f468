#pragma once
// Pass or fail per tensor, by tolerance groups keyed by (op type, dtype): the
// dtype is the narrower of the two sides' precisions (the narrowest dtype each
// computed the tensor through: f32 against bf16 is judged as bf16, even a
// LayerNorm kept in f32), each dtype has defaults and an op type may override them. A config's
// `[compare]` table replaces any of them:
//
//   [compare.bf16]           # every op compared in bf16
//   min_cosine = 0.99
//   [compare.bf16.matmul]    # one op type; keys not given come from [compare.bf16]
//   rtol = 0.05
//
// A tensor passes when its cosine is at least min_cosine (tensors of one
// element have none) and its largest absolute error is at most
// atol + rtol * max|baseline|, with no element finite on one side only.
#include <map>
#include <string>
#include <utility>

#include "compare/metrics.h"
#include "core/dtype.h"
#include "core/toml_reader.h"

namespace strata {

struct Tolerance {
  double min_cosine = 0;
  double rtol = 0;  // relative to the baseline tensor's largest magnitude
  double atol = 0;
  double update_reach = 0;  // the part of atol that is AdamW's reach (step_param in bf16 or f16), for the report
  bool passes(const TensorMetrics& metrics) const;
  // How close to failing: the largest of max_abs / allowed and (1 - cosine) / (1 - min_cosine); > 1 fails.
  double margin(const TensorMetrics& metrics) const;
};

// The dtype two sides are judged in: the one with fewer mantissa bits (integers as f32).
DType judged_dtype(DType a, DType b);

class ToleranceTable {
 public:
  ToleranceTable();  // the defaults (src/compare/README.md justifies them)
  // Applies a config's [compare] table (absent: the defaults); unknown keys are errors naming them.
  void apply(const TomlReader& compare);

  struct Group {
    std::string name;  // "bf16", or "bf16.matmul" where the op type has its own
    Tolerance tolerance;
  };
  // `update_reach`: a parameter compared after steps (step_param), the sum of both runs' AdamW reach
  // (compare/adamw_reach.h). In bf16 or f16, unless the config gives that dtype a step_param group, it is
  // judged against that reach alone: rounding below a gradient's noise moves elements by whole updates.
  Group lookup(const std::string& op, DType dtype, double update_reach = 0) const;

 private:
  std::map<std::string, Tolerance> dtypes_;  // by dtype name
  std::map<std::pair<std::string, std::string>, Tolerance> ops_;  // (dtype name, op)
};

}  // namespace strata
