#pragma once
// The content of a run report, as the JSON document the renderer draws (render_report.py): per
// run a summary; per metric one plot with a series per run (every recorded step); the config
// keys the runs set differently; the planner's predicted against measured step time; the
// end-of-run op summary. Everything read from the run directories is checked here, so the
// renderer only draws.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/run_record.h"

namespace strata {

// Short names for the runs: their directories' names, or the paths as given when two share a name.
std::vector<std::string> run_labels(const std::vector<std::filesystem::path>& dirs);

// Fails naming the file and key of a plan.json or ops.json that lacks what the report shows.
nlohmann::json report_document(const std::vector<RunRecord>& runs, const std::vector<std::string>& labels);

}  // namespace strata
