#pragma once
// Where a compiled graph's time goes: per op type, the share of measured
// kernel time, calls and the achieved FLOP/s and bytes/s (from the op schemas'
// counts), so kernels can be judged against the machine's peaks.
#include <string>
#include <vector>

#include "graph/executor.h"

namespace strata {

struct OpProfileRow {
  std::string op;  // op type; a dtype suffix (e.g. "matmul/bf16") when several dtypes ran
  int64_t nodes = 0;
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;  // over all calls
  double bytes = 0;
};

// Rows sorted by time, largest first.
std::vector<OpProfileRow> profile_by_op(const Graph& graph, const std::vector<NodeTiming>& timings);

// A table of the rows with totals; `runs` divides times to give per-run figures.
std::string format_op_profile(const std::vector<OpProfileRow>& rows, int64_t runs);

}  // namespace strata
