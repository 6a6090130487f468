#include "scan/scan_findings.h"

#include <algorithm>

#include "core/error.h"
#include "core/json_fields.h"

namespace strata {

namespace {

constexpr std::string_view kWhere = "the scanner's output";

Finding read_finding(const nlohmann::json& item, const std::string& where) {
  expect_json_object(item, where);
  Finding finding;
  finding.file = json_string(item, "file", where);
  finding.start_line = static_cast<int64_t>(json_number(item, "start_line", where));
  finding.end_line = static_cast<int64_t>(json_number(item, "end_line", where));
  for (auto [key, field] : {std::pair{"api", &finding.api}, {"category", &finding.category},
                            {"severity", &finding.severity}, {"reason", &finding.reason}, {"tip", &finding.tip},
                            {"rule_set", &finding.rule_set}}) {
    *field = json_string(item, key, where);
  }
  if (std::find(kSeverities.begin(), kSeverities.end(), finding.severity) == kSeverities.end()) {
    fail("{}: severity '{}' is not one of blocks, change, risk, info", json_member(where, "severity"), finding.severity);
  }
  return finding;
}

}  // namespace

std::string severity_words(const std::string& severity) {
  if (severity == "blocks") return "blocks the move";
  if (severity == "change") return "needs a change";
  if (severity == "risk") return "performance or numerics risk";
  return "information";
}

ScanFindings read_scan_findings(const nlohmann::json& document) {
  expect_json_object(document, kWhere);
  ScanFindings scan;
  scan.root = json_string(document, "root", kWhere);
  scan.files_scanned = static_cast<int64_t>(json_number(document, "files_scanned", kWhere));
  scan.lines_scanned = static_cast<int64_t>(json_number(document, "lines_scanned", kWhere));
  scan.seconds = document.contains("seconds") ? json_number(document, "seconds", kWhere) : 0;
  json_for_each_item(document, "findings", kWhere, [&](const nlohmann::json& item, const std::string& where) {
    scan.findings.push_back(read_finding(item, where));
  });
  json_for_each_item(document, "unreadable", kWhere, [&](const nlohmann::json& item, const std::string& where) {
    expect_json_object(item, where);
    scan.unreadable.push_back({json_string(item, "file", where), json_string(item, "reason", where)});
  });
  scan.rule_sets = json_required(document, "rule_sets", kWhere);
  scan.model = json_required(document, "model", kWhere);
  expect_json_object(scan.model, json_member(kWhere, "model"));
  return scan;
}

ScanSummary summarize(const ScanFindings& scan, size_t top) {
  ScanSummary summary;
  std::map<std::string, int64_t> per_file;
  for (const Finding& finding : scan.findings) {
    ++summary.by_category[finding.category];
    ++summary.by_severity[finding.severity];
    ++per_file[finding.file];
  }
  summary.top_files.assign(per_file.begin(), per_file.end());
  std::stable_sort(summary.top_files.begin(), summary.top_files.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (summary.top_files.size() > top) summary.top_files.resize(top);
  return summary;
}

}  // namespace strata
