#pragma once
// Draws a report document (report_document.h) as one self-contained HTML file: matplotlib's
// inline SVG for the plots, tables for the rest, no external resources. The drawing is
// render_report.py, compiled into the executable, run by `python3` on the PATH (or
// $STRATA_PYTHON); Debian's python3-matplotlib provides what it imports.
#include <string>

#include <nlohmann/json.hpp>

namespace strata {

// The HTML text. Fails with the interpreter's exit status (its message is on stderr), or naming
// the package to install when matplotlib is missing.
std::string render_report_html(const nlohmann::json& document);

}  // namespace strata
