#include "report/scan_section.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_fields.h"
#include "core/json_file.h"

namespace strata {

namespace {

const std::vector<std::string> kSeverityOrder{"blocks", "change", "risk", "info"};

// Category x severity counts, from the findings themselves.
nlohmann::json category_table(const nlohmann::json& document, const std::string& where) {
  std::map<std::string, std::map<std::string, int64_t>> counts;
  json_for_each_item(document, "findings", where, [&](const nlohmann::json& item, const std::string& item_where) {
    expect_json_object(item, item_where);
    const std::string severity = json_string(item, "severity", item_where);
    if (std::find(kSeverityOrder.begin(), kSeverityOrder.end(), severity) == kSeverityOrder.end()) {
      fail("{}: severity '{}' is not one of blocks, change, risk, info", json_member(item_where, "severity"), severity);
    }
    ++counts[json_string(item, "category", item_where)][severity];
  });
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [category, by_severity] : counts) {
    nlohmann::json row{{"category", category}};
    for (const std::string& severity : kSeverityOrder) {
      auto found = by_severity.find(severity);
      row[severity] = found == by_severity.end() ? 0 : found->second;
    }
    rows.push_back(row);
  }
  return rows;
}

nlohmann::json api_counts(const nlohmann::json& verdict, std::string_view key, const std::string& where) {
  nlohmann::json rows = nlohmann::json::array();
  json_for_each_item(verdict, key, where, [&](const nlohmann::json& item, const std::string& item_where) {
    expect_json_object(item, item_where);
    rows.push_back({{"api", json_string(item, "api", item_where)},
                    {"category", json_string(item, "category", item_where)},
                    {"count", json_number(item, "count", item_where)},
                    {"tip", json_string(item, "tip", item_where)}});
  });
  return rows;
}

nlohmann::json top_files(const nlohmann::json& summary, const std::string& where) {
  nlohmann::json rows = nlohmann::json::array();
  json_for_each_item(summary, "top_files", where, [&](const nlohmann::json& item, const std::string& item_where) {
    expect_json_object(item, item_where);
    rows.push_back({{"file", json_string(item, "file", item_where)},
                    {"findings", json_number(item, "findings", item_where)}});
  });
  return rows;
}

nlohmann::json model_entry(const nlohmann::json& model, const std::string& where) {
  expect_json_object(model, where);
  const bool found = json_bool(model, "found", false, where);
  const bool supported = json_bool(model, "supported", false, where);
  return {{"found", found},
          {"supported", supported},
          {"family", supported ? json_string(model, "family", where) : ""},
          {"evidence", found ? json_string(model, "evidence", where) : ""},
          {"reason", json_string(model, "reason", where)}};
}

}  // namespace

nlohmann::json scan_section(const std::filesystem::path& scan_json) {
  const nlohmann::json document = read_json_file(scan_json);
  const std::string where = fmt::format("'{}'", scan_json.string());
  expect_json_object(document, where);
  const nlohmann::json& summary = json_required(document, "summary", where);
  const std::string summary_where = json_member(where, "summary");
  expect_json_object(summary, summary_where);
  const nlohmann::json& verdict = json_required(document, "verdict", where);
  const std::string verdict_where = json_member(where, "verdict");
  expect_json_object(verdict, verdict_where);
  nlohmann::json why = nlohmann::json::array();
  json_for_each_item(verdict, "why", verdict_where, [&](const nlohmann::json& item, const std::string& item_where) {
    if (!item.is_string()) fail("{}: must be a string", item_where);
    why.push_back(item);
  });
  return {{"root", json_string(document, "root", where)},
          {"files_scanned", json_number(document, "files_scanned", where)},
          {"lines_scanned", json_number(document, "lines_scanned", where)},
          {"findings", json_number(summary, "findings", summary_where)},
          {"unreadable", json_number(summary, "unreadable", summary_where)},
          {"categories", category_table(document, where)},
          {"top_files", top_files(summary, summary_where)},
          {"model", model_entry(json_required(document, "model", where), json_member(where, "model"))},
          {"answer", json_string(verdict, "answer", verdict_where)},
          {"backend", json_string(verdict, "backend", verdict_where)},
          {"precision", json_string(verdict, "precision", verdict_where)},
          {"why", why},
          {"blockers", api_counts(verdict, "blockers", verdict_where)},
          {"changes", api_counts(verdict, "changes", verdict_where)},
          {"risks", api_counts(verdict, "risks", verdict_where)}};
}

}  // namespace strata
