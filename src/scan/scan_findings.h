#pragma once
// The scanner's document read back and checked: every finding, the files it could not read, and
// the summary people read first (counts by category and severity, the files with most findings).
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

// Severities, most serious first, as the rule sets spell them.
inline const std::vector<std::string> kSeverities{"blocks", "change", "risk", "info"};

// "blocks the move", "needs a change", ...: a severity in words.
std::string severity_words(const std::string& severity);

struct Finding {
  std::string file;
  int64_t start_line = 0, end_line = 0;
  std::string api, category, severity, reason, tip, rule_set;
};

struct UnreadableFile {
  std::string file, reason;
};

struct ScanFindings {
  std::string root;
  int64_t files_scanned = 0, lines_scanned = 0;
  double seconds = 0;
  std::vector<Finding> findings;
  std::vector<UnreadableFile> unreadable;
  nlohmann::json rule_sets;  // [{name, version, category, title, rules, file}]
  nlohmann::json model;      // the model found (model_mapping.py), as the scanner gives it
};

// Fails naming the key at fault when the document is not what scan_project.py writes.
ScanFindings read_scan_findings(const nlohmann::json& document);

struct ScanSummary {
  std::map<std::string, int64_t> by_category, by_severity;
  std::vector<std::pair<std::string, int64_t>> top_files;  // most findings first, at most `top`
};

ScanSummary summarize(const ScanFindings& scan, size_t top = 10);

}  // namespace strata
