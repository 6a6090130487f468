#pragma once
// Mixed precision at graph-build time: ops are appended through Autocast,
// which inserts `cast` nodes so each op computes in the precision the policy
// gives its type. Master weights stay f32 (params are cast where used, once
// per dtype) and the casts are differentiated like any op, so gradients
// reaching the params are f32.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace strata {

// A precision mode (f32, bf16, f16, or parse_dtype's other spellings such as
// fp32) as a dtype; anything else throws, naming `what`.
DType parse_precision_mode(const std::string& mode, const std::string& what);

struct PrecisionPolicy {
  DType low = DType::F32;          // compute dtype of low-precision ops; F32: no autocast
  std::set<std::string> fp32_ops;  // op types that compute in f32 whatever the mode

  // f32 | bf16 | f16 (fp32, fp16 and parse_dtype's other spellings accepted); every name in fp32_ops must be a registered op
  // (errors name `key`, the config key the list came from).
  static PrecisionPolicy parse(const std::string& mode, const std::vector<std::string>& fp32_ops,
                               const std::string& key);
};

// The ops whose schema says PrecisionRole::F32Default (norms, softmax-like
// ops, the loss, reductions into statistics, lookups, the optimizer), sorted.
std::vector<std::string> default_fp32_ops();

class Autocast {
 public:
  Autocast(Graph& graph, PrecisionPolicy policy);

  std::vector<int> apply(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs = {},
                         const std::string& label = "");
  int apply1(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs = {},
             const std::string& label = "") {
    return apply(op, inputs, attrs, label).at(0);
  }
 private:
  // The dtype `op` computes in given its inputs' dtypes.
  DType compute_dtype(const std::string& op, const std::vector<int>& inputs) const;

  int cast(int value, DType dtype);

  Graph& graph_;
  PrecisionPolicy policy_;
  std::map<std::pair<int, DType>, int> casts_;  // one cast node per (value, dtype)
};

}  // namespace strata
