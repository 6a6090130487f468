#include "comm/config.h"

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace strata::comm {
namespace {

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t");
  return std::string(text.substr(begin, end - begin + 1));
}

double parse_number(const char* name, const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || *end != '\0') fail("{}='{}' is not a number", name, text);
  return value;
}

size_t parse_byte_count(const char* name, const char* text) {
  double bytes = parse_number(name, text);
  if (bytes < 0.0) fail("{}={} must be at least 0", name, text);
  return static_cast<size_t>(bytes);
}

bool parse_flag(const char* name, const char* text) {
  std::string value = trim(text);
  if (value == "1" || value == "true" || value == "yes" || value == "on") return true;
  if (value == "0" || value == "false" || value == "no" || value == "off" || value.empty()) return false;
  fail("{}='{}' must be 0 or 1", name, text);
}

CallCheck parse_call_check(const char* name, const char* text) {
  std::string value = trim(text);
  if (value == "overlapped") return CallCheck::Overlapped;
  if (value == "before") return CallCheck::Before;
  if (value == "off") return CallCheck::Off;
  fail("{}='{}' must be overlapped, before or off", name, text);
}

}  // namespace

void CommConfig::pin(std::string_view spec, std::string_view source) {
  pinned.fill(Algorithm::Auto);
  pinned_by = std::string(source);
  std::string text = trim(spec);
  if (text.empty()) return;
  if (text.find('=') == std::string::npos) {
    Algorithm algorithm = parse_algorithm(text, source);
    for (Collective op : kCollectives) {
      if (implements(algorithm, op)) pinned[static_cast<size_t>(op)] = algorithm;
    }
    return;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = trim(std::string_view(text).substr(start, comma == std::string::npos ? std::string::npos
                                                                                             : comma - start));
    size_t equals = item.find('=');
    if (equals == std::string::npos) fail("{}: '{}' must look like collective=algorithm", source, item);
    Collective op = parse_collective(trim(item.substr(0, equals)), source);
    Algorithm algorithm = parse_algorithm(trim(item.substr(equals + 1)), source);
    pinned[static_cast<size_t>(op)] = algorithm;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}

void CommConfig::apply_environment() {
  if (const char* value = std::getenv("STRATA_COMM_TIMEOUT")) timeout_s = parse_number("STRATA_COMM_TIMEOUT", value);
  if (const char* value = std::getenv("STRATA_COMM_CHECK")) call_check = parse_call_check("STRATA_COMM_CHECK", value);
  if (const char* value = std::getenv("STRATA_COMM_DEBUG"); value && parse_flag("STRATA_COMM_DEBUG", value)) {
    call_check = CallCheck::Before;
  }
  if (const char* value = std::getenv("STRATA_COMM_LOG")) log_decisions = parse_flag("STRATA_COMM_LOG", value);
  if (const char* value = std::getenv("STRATA_COMM_ALGO")) pin(value, "STRATA_COMM_ALGO");
  if (const char* value = std::getenv("STRATA_COMM_TOPOLOGY")) topology_file = value;
  if (const char* value = std::getenv("STRATA_COMM_CACHE_DIR")) cache_dir = value;
  if (const char* value = std::getenv("STRATA_COMM_REPROBE")) reprobe = parse_flag("STRATA_COMM_REPROBE", value);
  if (const char* value = std::getenv("STRATA_COMM_CHUNK_BYTES")) {
    double bytes = parse_number("STRATA_COMM_CHUNK_BYTES", value);
    if (bytes < 1.0) fail("STRATA_COMM_CHUNK_BYTES={} must be at least 1", value);
    chunk_bytes = static_cast<size_t>(bytes);
  }
  if (const char* value = std::getenv("STRATA_COMM_PIPELINE_DEPTH")) {
    pipeline_depth = static_cast<int>(parse_number("STRATA_COMM_PIPELINE_DEPTH", value));
  }
  if (const char* value = std::getenv("STRATA_COMM_STAGING_BYTES")) {
    exchange_staging_bytes = parse_byte_count("STRATA_COMM_STAGING_BYTES", value);
  }
  if (const char* value = std::getenv("STRATA_COMM_ALL_TO_ALL_STAGING_BYTES")) {
    all_to_all_staging_bytes = parse_byte_count("STRATA_COMM_ALL_TO_ALL_STAGING_BYTES", value);
  }
  if (const char* value = std::getenv("STRATA_COMM_RANKS_PER_NODE")) {
    simulated_ranks_per_node = static_cast<int>(parse_number("STRATA_COMM_RANKS_PER_NODE", value));
  }
  validate("STRATA_COMM_* environment");
}

void CommConfig::validate(std::string_view source) const {
  if (!(timeout_s > 0.0)) fail("{}: the timeout must be > 0 seconds, got {}", source, timeout_s);
  if (chunk_bytes < 1) fail("{}: chunk_bytes must be at least 1", source);
  if (pipeline_depth < 1 || pipeline_depth > 64) fail("{}: pipeline depth must be in [1, 64], got {}", source, pipeline_depth);
  if (simulated_ranks_per_node < 0) {
    fail("{}: simulated ranks per node must be >= 0, got {}", source, simulated_ranks_per_node);
  }
}

CommConfig CommConfig::from_environment() {
  CommConfig config;
  config.apply_environment();
  return config;
}

}  // namespace strata::comm
