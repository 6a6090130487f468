// strata scan: reads a PyTorch training project (Python with Python's own parser, C++/CUDA and
// build files for extensions) and lists every platform-specific construct with a tip; maps the
// model it builds to a Strata config and ends with one verdict: quick switch, needs changes or
// rewrite (src/scan/).
#include <fmt/core.h>

#include "backends/backends.h"
#include "cli/commands.h"
#include "core/dtype.h"
#include "core/error.h"
#include "graph/autocast.h"
#include "core/file_io.h"
#include "scan/scan_output.h"
#include "scan/scanner_process.h"

namespace strata::cli {
namespace {

struct ScanArgs {
  ScanOptions options;
  std::string format = "text";
  std::string out;
  std::string emit_config;
  std::string backend = "cpu";
  std::string precision;  // empty: the project's own habit
};

ScanOutcome scan_project(const ScanArgs& args) {
  get_backend(args.backend);  // an unknown name fails here, listing the known ones
  ScanOutcome outcome;
  outcome.scan = read_scan_findings(run_scanner(args.options));
  outcome.summary = summarize(outcome.scan);
  outcome.backend = args.backend;
  outcome.precision = args.precision.empty()
                          ? project_precision(outcome.scan)
                          : std::string(dtype_name(parse_precision_mode(args.precision, "--precision")));
  outcome.model = check_model(outcome.scan.model, outcome.backend, outcome.precision);
  outcome.verdict = judge_scan(outcome.scan, outcome.model);
  return outcome;
}

std::string formatted(const ScanArgs& args, const ScanOutcome& outcome) {
  if (args.format == "csv") return scan_csv(outcome.scan);
  if (args.format == "json") return scan_json(outcome).dump(2) + "\n";
  // The summary first, for people; the verdict again last, where a long list ends on a terminal.
  return scan_summary_text(outcome) + "\nfindings:\n" + scan_findings_text(outcome.scan) + "\n" +
         scan_verdict_line(outcome);
}

void run_scan(const ScanArgs& args) {
  const ScanOutcome outcome = scan_project(args);
  if (!args.emit_config.empty()) {
    if (outcome.model.config_toml.empty()) {
      fail("--emit-config {}: no config to write: {}", args.emit_config,
           outcome.model.found ? outcome.model.reason : "no model Strata knows was recognised");
    }
    write_file_atomic(args.emit_config, outcome.model.config_toml);
  }
  const std::string report = formatted(args, outcome);
  if (args.out.empty()) {
    fmt::print("{}", report);
    return;
  }
  write_file_atomic(args.out, report);
  // The file holds the details; the terminal gets the summary people read first.
  fmt::print("{}wrote {} ({} findings as {})\n", scan_summary_text(outcome), args.out, outcome.scan.findings.size(),
             args.format);
  if (!args.emit_config.empty()) fmt::print("wrote {} (the {} model as a Strata config)\n", args.emit_config, outcome.model.family);
}

}  // namespace

void add_scan_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "scan",
      "Read a PyTorch training project and list every platform-specific construct (file, lines, API, tip, category, "
      "severity); map its model to a Strata config and judge the move: quick switch, needs changes or rewrite");
  auto args = std::make_shared<ScanArgs>();
  command->add_option("path", args->options.path, "The project directory, or one file")->required();
  command->add_option("--format", args->format, "text (summary, then findings), csv or json")
      ->check(CLI::IsMember({"text", "csv", "json"}))
      ->capture_default_str();
  command->add_option("--out,-o", args->out, "Write the report here (replaced atomically); the summary still prints");
  command->add_option("--exclude", args->options.excludes,
                      "Skip paths matching this glob (relative to the project, or a file or directory name); "
                      "repeatable")
      ->allow_extra_args(false);
  command->add_option("--rules", args->options.rules, "An extra rule file (TOML, as src/scan/rules/); repeatable")
      ->allow_extra_args(false);
  command->add_option("--emit-config", args->emit_config, "Write the model found as a Strata config (TOML)");
  command->add_option("--backend", args->backend, "The backend the verdict is for (cpu, ref, opencl)")
      ->capture_default_str();
  command->add_option("--precision", args->precision,
                      "precision.compute for the verdict (f32, bf16, f16); default: the project's own habit");
  command->add_option("--max-file-mb", args->options.max_file_mb, "Larger files are reported unreadable")
      ->capture_default_str();
  command->callback([args] { run_scan(*args); });
}

}  // namespace strata::cli
