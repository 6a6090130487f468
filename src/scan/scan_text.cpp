#include <fmt/format.h>
#include <fmt/ranges.h>

#include "scan/scan_output.h"

namespace strata {

namespace {

void append_counts(std::string& text, const std::string& title, const std::vector<ApiCount>& counts, size_t limit) {
  if (counts.empty()) return;
  text += fmt::format("{}:\n", title);
  for (size_t i = 0; i < counts.size() && i < limit; ++i) {
    text += fmt::format("  {:>5}x {} [{}]: {}\n", counts[i].count, counts[i].api, counts[i].category, counts[i].tip);
  }
  if (counts.size() > limit) text += fmt::format("  ... and {} more API(s) (see the findings)\n", counts.size() - limit);
}

std::string model_text(const ModelCheck& model) {
  if (!model.found) return fmt::format("model: none recognised ({})\n", model.reason);
  std::string text = model.supported
                         ? fmt::format("model: {} from {} ({})\n", model.family, model.evidence, model.reason)
                         : fmt::format("model: {}: not a Strata family: {}\n", model.evidence, model.reason);
  if (!model.assumed.empty()) text += fmt::format("  assumed (not in the project): {}\n", fmt::join(model.assumed, ", "));
  if (!model.config_error.empty()) text += fmt::format("  the config does not load: {}\n", model.config_error);
  if (!model.also_found.empty()) text += fmt::format("  also found: {}\n", fmt::join(model.also_found, "; "));
  return text;
}

}  // namespace

std::string scan_summary_text(const ScanOutcome& outcome) {
  const ScanFindings& scan = outcome.scan;
  std::string text = fmt::format("strata scan of {}: {} files, {} lines in {:.2f} s; {} findings, {} unreadable\n",
                                 scan.root, scan.files_scanned, scan.lines_scanned, scan.seconds, scan.findings.size(),
                                 scan.unreadable.size());
  text += "by severity:";
  for (const std::string& severity : kSeverities) {
    auto found = outcome.summary.by_severity.find(severity);
    text += fmt::format("  {} {} ({})", found == outcome.summary.by_severity.end() ? 0 : found->second, severity,
                        severity_words(severity));
  }
  text += "\nby category:";
  for (const auto& [category, count] : outcome.summary.by_category) text += fmt::format("  {} {}", count, category);
  text += "\nfiles with most findings:";
  for (const auto& [file, count] : outcome.summary.top_files) text += fmt::format("  {} ({})", file, count);
  text += "\n";
  text += model_text(outcome.model);
  append_counts(text, "blocks the move", outcome.verdict.blockers, 10);
  append_counts(text, "needs changes", outcome.verdict.changes, 15);
  append_counts(text, "risks to check", outcome.verdict.risks, 5);
  text += scan_verdict_line(outcome);
  for (const std::string& why : outcome.verdict.why) text += fmt::format("  - {}\n", why);
  return text;
}

std::string scan_verdict_line(const ScanOutcome& outcome) {
  return fmt::format("verdict on backend '{}' in {}: {}\n", outcome.backend, outcome.precision,
                     answer_name(outcome.verdict.answer));
}

std::string scan_findings_text(const ScanFindings& scan) {
  std::string text;
  for (const Finding& f : scan.findings) {
    const std::string lines = f.start_line == f.end_line ? fmt::format("{}", f.start_line)
                                                         : fmt::format("{}-{}", f.start_line, f.end_line);
    text += fmt::format("{}:{}: {} [{}, {}]: {}; {}\n", f.file, lines, f.api, f.category, f.severity, f.reason, f.tip);
  }
  for (const UnreadableFile& file : scan.unreadable) text += fmt::format("{}: unreadable: {}\n", file.file, file.reason);
  return text;
}

}  // namespace strata
