#include <fmt/format.h>

#include "scan/scan_output.h"
#include "train/op_coverage.h"

namespace strata {

namespace {

// RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled.
std::string csv_field(const std::string& value) {
  if (value.find_first_of(",\"\r\n") == std::string::npos) return value;
  std::string quoted = "\"";
  for (char c : value) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

nlohmann::json counts_json(const std::vector<ApiCount>& counts) {
  nlohmann::json list = nlohmann::json::array();
  for (const ApiCount& c : counts) {
    list.push_back({{"api", c.api}, {"category", c.category}, {"severity", c.severity}, {"count", c.count}, {"tip", c.tip}});
  }
  return list;
}

nlohmann::json model_json(const ModelCheck& model) {
  nlohmann::json json{{"found", model.found}, {"supported", model.supported}, {"evidence", model.evidence},
                      {"reason", model.reason}, {"family", model.family}, {"assumed", model.assumed}, {"missing", model.missing}, {"also_found", model.also_found},
                      {"config", model.config_toml}, {"config_error", model.config_error}};
  json["coverage"] = model.coverage ? coverage_json(*model.coverage) : nlohmann::json(nullptr);
  return json;
}

}  // namespace

std::string scan_csv(const ScanFindings& scan) {
  std::string text = "File,Start Line,End Line,API,Tips,Category,Severity,Reason\r\n";
  for (const Finding& f : scan.findings) {
    text += fmt::format("{},{},{},{},{},{},{},{}\r\n", csv_field(f.file), f.start_line, f.end_line, csv_field(f.api),
                        csv_field(f.tip), csv_field(f.category), csv_field(f.severity), csv_field(f.reason));
  }
  return text;
}

nlohmann::json scan_json(const ScanOutcome& outcome) {
  const ScanFindings& scan = outcome.scan;
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : scan.findings) {
    findings.push_back({{"file", f.file}, {"start_line", f.start_line}, {"end_line", f.end_line}, {"api", f.api},
                        {"tip", f.tip}, {"category", f.category}, {"severity", f.severity}, {"reason", f.reason},
                        {"rule_set", f.rule_set}});
  }
  nlohmann::json unreadable = nlohmann::json::array();
  for (const UnreadableFile& file : scan.unreadable) unreadable.push_back({{"file", file.file}, {"reason", file.reason}});
  nlohmann::json top_files = nlohmann::json::array();
  for (const auto& [file, count] : outcome.summary.top_files) top_files.push_back({{"file", file}, {"findings", count}});
  const ScanVerdict& verdict = outcome.verdict;
  return {{"root", scan.root},
          {"files_scanned", scan.files_scanned},
          {"lines_scanned", scan.lines_scanned},
          {"seconds", scan.seconds},
          {"rule_sets", scan.rule_sets},
          {"summary",
           {{"findings", scan.findings.size()}, {"unreadable", scan.unreadable.size()},
            {"by_category", outcome.summary.by_category}, {"by_severity", outcome.summary.by_severity},
            {"top_files", top_files}}},
          {"model", model_json(outcome.model)},
          {"verdict",
           {{"answer", std::string(answer_name(verdict.answer))}, {"backend", outcome.backend},
            {"precision", outcome.precision}, {"why", verdict.why}, {"blockers", counts_json(verdict.blockers)},
            {"changes", counts_json(verdict.changes)}, {"risks", counts_json(verdict.risks)}}},
          {"findings", findings},
          {"unreadable", unreadable}};
}

}  // namespace strata
