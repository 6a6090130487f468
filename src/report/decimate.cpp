#include "report/decimate.h"

#include <cmath>

namespace strata {

MetricSeries thin_for_drawing(const MetricSeries& series, size_t limit) {
  const size_t count = series.values.size();
  if (count <= limit) return series;
  const size_t buckets = limit / 2;
  MetricSeries thinned;
  for (size_t bucket = 0; bucket < buckets; ++bucket) {
    const size_t begin = bucket * count / buckets, end = (bucket + 1) * count / buckets;
    size_t low = end, high = end;
    for (size_t i = begin; i < end; ++i) {
      const double value = series.values[i];
      if (!std::isfinite(value)) continue;
      if (low == end || value < series.values[low]) low = i;
      if (high == end || value > series.values[high]) high = i;
    }
    if (low == end) continue;  // nothing finite in this bucket
    for (size_t i : {std::min(low, high), std::max(low, high)}) {
      if (!thinned.steps.empty() && thinned.steps.back() == series.steps[i]) continue;  // low == high
      thinned.steps.push_back(series.steps[i]);
      thinned.values.push_back(series.values[i]);
    }
  }
  return thinned;
}

}  // namespace strata
