#pragma once
// A long run's metric, thinned for drawing: a plot a few hundred pixels wide cannot show a million
// steps, and an SVG path of them would make the page too large to open. Above a limit the steps are
// cut into equal buckets and each keeps its lowest and highest value (in step order), so spikes and
// the envelope survive where sampling every k-th step would drop them.
#include <cstddef>

#include "report/run_record.h"

namespace strata {

inline constexpr size_t kMaxDrawnPoints = 10000;

// `series` itself when it has at most `limit` points; else at most `limit` of them. NaN values (steps
// that recorded null) are left out of thinned series.
MetricSeries thin_for_drawing(const MetricSeries& series, size_t limit = kMaxDrawnPoints);

}  // namespace strata
