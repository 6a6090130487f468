#include "scan/scanner_process.h"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"
#include "core/subprocess.h"
#include "scan/scanner_files.h"

namespace strata {

namespace {

// The scanner's exit status when its Python lacks tomllib (before 3.11): try the next one.
constexpr int kPythonTooOld = 3;

void write_scanner(const std::filesystem::path& directory) {
  for (const ScannerFile& file : kScannerFiles) {
    const std::filesystem::path path = directory / file.path;
    std::filesystem::create_directories(path.parent_path());
    write_file_atomic(path, file.text);
  }
}

std::vector<std::string> scanner_arguments(const std::string& python, const std::filesystem::path& directory,
                                           const ScanOptions& options) {
  std::vector<std::string> argv{python,      (directory / "python" / "scan_project.py").string(), options.path,
                                "--rules-dir", (directory / "rules").string(), "--max-file-mb",
                                fmt::format("{}", options.max_file_mb)};
  for (const std::string& glob : options.excludes) argv.insert(argv.end(), {"--exclude", glob});
  for (const std::string& rules : options.rules) argv.insert(argv.end(), {"--rules", rules});
  return argv;
}

}  // namespace

nlohmann::json run_scanner(const ScanOptions& options) {
  if (!std::filesystem::exists(options.path)) fail("strata scan: '{}' does not exist", options.path);
  if (options.max_file_mb <= 0) fail("--max-file-mb must be positive, not {}", options.max_file_mb);
  const TemporaryDirectory scratch("strata-scan");
  write_scanner(scratch.path());
  const std::vector<std::string> interpreters = python_interpreters();
  for (const std::string& python : interpreters) {
    ProcessOutcome scanned = run_process(scanner_arguments(python, scratch.path(), options), /*capture_stderr=*/false);
    if (scanned.exit_status == kPythonTooOld || scanned.exit_status == kProgramNotFound) continue;
    if (scanned.exit_status != 0) {
      fail("strata scan: the scanner ('{}' running scan_project.py) failed with status {} (its message is above)",
           python, scanned.exit_status);
    }
    return parse_json(scanned.output, "the scanner's output");
  }
  fail("strata scan reads Python with Python's own parser and needs Python 3.11 or newer (tomllib), which no "
       "interpreter tried ({}) is: install python3 (Debian 12 has 3.11) or set STRATA_PYTHON",
       fmt::join(interpreters, ", "));
}

}  // namespace strata
