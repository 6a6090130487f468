#pragma once
// Runs the scanner's Python part (python/scan_project.py, compiled in) over a project and returns
// the JSON document it prints: findings, unreadable files, rule sets and the model it found.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata {

struct ScanOptions {
  std::string path;                   // a project directory or one file
  std::vector<std::string> excludes;  // globs of paths (relative to the project) or names to skip
  std::vector<std::string> rules;     // extra rule files, after the compiled-in sets
  double max_file_mb = 8;             // larger files are reported unreadable
};

// Fails naming the interpreter and what went wrong when no Python 3.11+ can run the scanner.
nlohmann::json run_scanner(const ScanOptions& options);

}  // namespace strata
