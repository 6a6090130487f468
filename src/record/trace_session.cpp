#include "record/trace_session.h"

#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <set>

#include <fmt/core.h>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"
#include "core/trace_analysis.h"

namespace strata {

TraceOptions parse_trace_steps(const std::string& text) {
  auto number = [&](std::string_view part) {
    int64_t value = 0;
    auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || error != std::errc() || end != part.data() + part.size()) {
      fail("--trace-steps '{}': expected A:B (steps A to B-1, numbered from 1 as in metrics.jsonl), A: or A", text);
    }
    return value;
  };
  TraceOptions options;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    options.first_step = number(text);
    options.end_step = options.first_step + 1;
  } else {
    const std::string_view view(text);
    options.first_step = colon == 0 ? 1 : number(view.substr(0, colon));
    options.end_step = colon + 1 == text.size() ? 0 : number(view.substr(colon + 1));
  }
  if (options.first_step < 1) fail("--trace-steps '{}': steps are numbered from 1", text);
  if (options.end_step != 0 && options.end_step <= options.first_step) {
    fail("--trace-steps '{}': B must be after A (A:B traces steps A to B-1)", text);
  }
  return options;
}

TraceSession::TraceSession(TraceOptions options, JobWorld& world)
    : options_(std::move(options)), world_(world), tracer_(std::make_unique<trace::Tracer>(world.rank())) {
  if (options_.path.empty()) fail("--trace: give the file to write the timeline to");
  tracer_->install();
}

nlohmann::json TraceSession::finish() {
  if (!tracer_) return {};
  tracer_->set_recording(false);
  const int rank = world_.rank(), ranks = world_.size();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  // A common instant right after a barrier over the world: lines up ranks on hosts whose clocks differ.
  world_.all_succeeded(true);
  const double sync_us = trace::now_us();
  nlohmann::json mine = tracer_->to_json(
      {{"rank", rank},
       {"host", host},
       {"clock_sync_us", sync_us},
       {"steps", fmt::format("{}:{}", options_.first_step,
                             options_.end_step == 0 ? std::string() : std::to_string(options_.end_step))}});
  tracer_.reset();  // uninstalled: nothing records from here on
  const std::string& path = options_.path;
  auto part_path = [&](int r) { return trace::sibling_path(path, fmt::format(".rank{}.json", r)); };
  // Every rank but the first writes its part beside the trace (the run directory's rule: a
  // filesystem every rank sees); the first merges them once every rank has written.
  std::string problem;
  if (!world_.reports()) {
    try {
      write_file_atomic(part_path(rank), mine.dump());
    } catch (const std::exception& error) {
      problem = error.what();
    }
    if (!problem.empty()) fmt::print(stderr, "trace: rank {} could not write its part: {}\n", rank, problem);
  }
  const bool every_part = world_.all_succeeded(problem.empty());
  if (!world_.reports()) return {};
  if (!every_part) {
    fmt::print(stderr, "trace: not written: a rank could not write its part of '{}' (its message says why)\n", path);
    return {};
  }
  std::vector<nlohmann::json> parts;
  parts.push_back(std::move(mine));
  for (int r = 1; r < ranks; ++r) parts.push_back(read_json_file(part_path(r)));
  nlohmann::json merged = trace::merge_traces(parts);
  write_file_atomic(path, merged.dump());
  for (int r = 1; r < ranks; ++r) std::filesystem::remove(part_path(r));
  return merged;
}

std::string TraceSession::summary(const nlohmann::json& merged) const {
  if (merged.is_null()) return "";
  const std::vector<trace::StepGaps> steps = trace::analyse_steps(merged);
  const std::string gaps_path = trace::sibling_path(options_.path, ".gaps.json");
  write_file_atomic(gaps_path, trace::gaps_to_json(steps).dump(2));
  size_t spans = 0;
  std::set<int> ranks;
  for (const nlohmann::json& event : merged["traceEvents"]) {
    spans += event.value("ph", "") == "X";
    ranks.insert(event.value("pid", 0));
  }
  std::set<int64_t> traced;
  for (const trace::StepGaps& gaps : steps) traced.insert(gaps.step);
  return fmt::format("trace: {} ({} spans, {} rank(s), steps {}; open in https://ui.perfetto.dev or "
                     "chrome://tracing); gap analysis also in {}\n{}",
                     options_.path, spans, ranks.size(),
                     traced.empty() ? std::string("none") : fmt::format("{}-{}", *traced.begin(), *traced.rbegin()),
                     gaps_path, trace::format_gap_analysis(steps));
}

}  // namespace strata
