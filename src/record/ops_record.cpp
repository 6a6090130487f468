#include "record/ops_record.h"

#include <nlohmann/json.hpp>

#include "core/file_io.h"

namespace strata {

void write_ops_record(const std::filesystem::path& run_dir, const nlohmann::json& coverage,
                      const std::vector<FallbackRecord>& fallbacks, const std::vector<TransferRecord>& transfers,
                      int64_t steps, const std::vector<OpProfileRow>& profile, int64_t profile_runs) {
  nlohmann::json ran_not_native = nlohmann::json::array();
  for (const FallbackRecord& record : fallbacks) {
    ran_not_native.push_back({{"op", record.op},
                              {"dtype", std::string(dtype_name(record.dtype))},
                              {"shape", record.shape},
                              {"route", std::string(route_name(record.route))},
                              {"count", record.count}});
  }
  nlohmann::json moved = nlohmann::json::array();
  for (const TransferRecord& transfer : transfers) {
    moved.push_back({{"op", transfer.op},
                     {"dtype", std::string(dtype_name(transfer.dtype))},
                     {"direction", std::string(transfer_direction_name(transfer.direction))},
                     {"tensors", transfer.count},
                     {"bytes", transfer.bytes},
                     {"seconds", transfer.seconds}});
  }
  const TransferTotals totals = total_of(transfers);
  const double per_step = steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0;
  nlohmann::json record{{"coverage", coverage},
                        {"ran_not_native", ran_not_native},
                        {"transfers", moved},
                        {"transfers_per_step",
                         {{"steps", steps},
                          {"tensors", static_cast<double>(totals.count) * per_step},
                          {"bytes", static_cast<double>(totals.bytes) * per_step},
                          {"seconds", totals.seconds * per_step}}}};
  if (profile_runs > 0) {
    nlohmann::json rows = nlohmann::json::array();
    for (const OpProfileRow& row : profile) {
      rows.push_back({{"op", row.op},
                      {"nodes", row.nodes},
                      {"calls", row.calls},
                      {"seconds", row.seconds},
                      {"flops", row.flops},
                      {"bytes", row.bytes}});
    }
    record["kernel_profile"] = {{"graph_runs", profile_runs}, {"ops", rows}};
  }
  write_file_atomic(run_dir / "ops.json", record.dump(2) + "\n");
}

}  // namespace strata
