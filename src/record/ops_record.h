#pragma once
// run_dir/ops.json, written at the end of a run: the run's op summary for `strata report` and for
// anyone auditing a migration afterwards. It holds the config's training step op by op as
// `strata ops` reports it (routes, FLOP shares, verdict), the non-native runs the run's dispatcher
// actually counted, the host-device transfers they needed (in all and per step), and with
// --profile the kernel time per op type.
#include <filesystem>
#include <vector>

#include "graph/profile_report.h"
#include "ops/dispatcher.h"
#include <nlohmann/json.hpp>

namespace strata {

// `coverage`: the config's step op by op, as `strata ops --json` gives it; `profile_runs`: how many
// graph runs `profile` covers (0: the run was not profiled).
void write_ops_record(const std::filesystem::path& run_dir, const nlohmann::json& coverage,
                      const std::vector<FallbackRecord>& fallbacks, const std::vector<TransferRecord>& transfers,
                      int64_t steps, const std::vector<OpProfileRow>& profile, int64_t profile_runs);

}  // namespace strata
