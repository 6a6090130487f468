#pragma once
// What `strata scan` writes: the summary people read first (counts by category and severity, the
// files with most findings, the model and the verdict), the findings as text, CSV (the columns
// migration engineers know from vendor tools: File, Start Line, End Line, API, Tips, then
// Category, Severity, Reason) or one JSON document (what `strata report --scan` reads).
#include <string>

#include <nlohmann/json.hpp>

#include "scan/model_config.h"
#include "scan/scan_findings.h"
#include "scan/scan_verdict.h"

namespace strata {

struct ScanOutcome {
  ScanFindings scan;
  ScanSummary summary;
  ModelCheck model;
  ScanVerdict verdict;
  std::string backend, precision;
};

std::string scan_summary_text(const ScanOutcome& outcome);
std::string scan_verdict_line(const ScanOutcome& outcome);  // "verdict on backend 'cpu' in f32: rewrite"
std::string scan_findings_text(const ScanFindings& scan);  // one line per finding, then the unreadable files
std::string scan_csv(const ScanFindings& scan);
nlohmann::json scan_json(const ScanOutcome& outcome);

}  // namespace strata
