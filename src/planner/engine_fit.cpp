#include "planner/engine_fit.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "core/error.h"
#include "planner/device_time.h"

namespace strata {

namespace {

// n points from lo to hi, evenly spaced in log.
std::vector<double> log_grid(double lo, double hi, int n) {
  std::vector<double> grid;
  for (int i = 0; i < n; ++i) grid.push_back(lo * std::pow(hi / lo, static_cast<double>(i) / (n - 1)));
  return grid;
}

template <typename Sample>
FitQuality quality_of(const std::vector<Sample>& samples, const std::function<double(const Sample&)>& predict) {
  FitQuality quality;
  std::vector<double> errors;
  for (const Sample& s : samples) errors.push_back(std::abs(predict(s) / s.seconds - 1));
  quality.samples = errors.size();
  if (errors.empty()) return quality;
  std::sort(errors.begin(), errors.end());
  quality.median_abs_error = errors[errors.size() / 2];
  quality.max_abs_error = errors.back();
  return quality;
}

double weight_of(const GemmMeasurement& s) { return s.weight; }
double weight_of(const AttentionMeasurement&) { return 1.0; }

template <typename Sample>
double log_loss(const std::vector<Sample>& samples, const std::function<double(const Sample&)>& predict) {
  double loss = 0;
  for (const Sample& s : samples) {
    double r = std::log(predict(s) / s.seconds);
    loss += weight_of(s) * r * r;
  }
  return loss;
}

std::vector<double> overhead_grid() {
  std::vector<double> grid = log_grid(1e-9, 1e-3, 121);
  grid.insert(grid.begin(), 0.0);
  return grid;
}

// The (a, b) pair of the two grids with the least log loss, then refined on a
// grid ten times finer around it (the first grid's neighbours as bounds).
template <typename Sample>
void fit_two(const std::vector<Sample>& samples, const std::function<double(const Sample&)>& predict,
             const std::vector<double>& a_grid, const std::vector<double>& b_grid,
             const std::function<void(double, double)>& apply, double& a_best, double& b_best) {
  auto search = [&](const std::vector<double>& as, const std::vector<double>& bs) {
    double best = std::numeric_limits<double>::infinity();
    for (double a : as) {
      for (double b : bs) {
        apply(a, b);
        double loss = log_loss(samples, predict);
        if (loss < best) best = loss, a_best = a, b_best = b;
      }
    }
  };
  search(a_grid, b_grid);
  auto around = [](const std::vector<double>& grid, double at) {
    auto found = std::find(grid.begin(), grid.end(), at);
    double lo = found == grid.begin() ? at : *(found - 1);
    double hi = found + 1 == grid.end() ? at : *(found + 1);
    std::vector<double> fine;
    for (int i = 0; i <= 20; ++i) fine.push_back(lo + (hi - lo) * i / 20.0);
    return fine;
  };
  search(around(a_grid, a_best), around(b_grid, b_best));
}

void check_samples(const std::vector<double>& seconds, const char* what) {
  for (double s : seconds) {
    if (!(s > 0) || !std::isfinite(s)) fail("{} measurement with a time of {} s cannot be fitted", what, s);
  }
}

}  // namespace

FitQuality fit_gemm_engine(DTypePerformance& perf, const std::vector<GemmMeasurement>& samples, double launch_s) {
  if (samples.empty()) fail("no GEMM measurements to fit the matrix engine to");
  std::vector<double> seconds;
  for (const GemmMeasurement& s : samples) seconds.push_back(s.seconds);
  check_samples(seconds, "a GEMM");
  GemmEngine& engine = perf.gemm;
  std::function<double(const GemmMeasurement&)> predict = [&](const GemmMeasurement& s) {
    return launch_s + gemm_compute_seconds(s.shape, perf);
  };
  // Samples by the alignment level they run at: the widest decides the tiles and the fixed cost,
  // each narrower level then its own efficiency.
  std::vector<std::vector<GemmMeasurement>> by_level(engine.alignment.size());
  for (const GemmMeasurement& s : samples) {
    const GemmShape& g = s.shape;
    for (size_t level = 0; level < engine.alignment.size(); ++level) {
      const int64_t elements = engine.alignment[level].first;
      if (g.n % elements == 0 && g.k % elements == 0) {
        by_level[level].push_back(s);
        break;
      }
    }
  }
  size_t widest = 0;
  while (widest + 1 < by_level.size() && by_level[widest].empty()) ++widest;
  const std::vector<GemmMeasurement>& aligned = by_level[widest];
  engine.alignment[widest].second = 1.0;  // the tiles' efficiencies carry the aligned speed
  for (size_t level = 0; level < widest; ++level) engine.alignment[level].second = 1.0;

  // First every tile scaled together, with the fixed cost.
  double best_tile = 0;
  for (const GemmTile& tile : engine.tiles) best_tile = std::max(best_tile, tile.efficiency);
  const std::vector<GemmTile> relative = engine.tiles;
  double scale = 1, overhead = 0;
  fit_two(aligned, predict, log_grid(0.01, 1.0, 120), overhead_grid(),
          [&](double a, double b) {
            for (size_t i = 0; i < relative.size(); ++i) {
              engine.tiles[i].efficiency = std::min(1.0, relative[i].efficiency / best_tile * a);
            }
            engine.tile_overhead_s = b;
          },
          scale, overhead);
  engine.tile_overhead_s = overhead;
  // Then each tile's own efficiency and the fixed cost again, a few rounds of coordinate descent:
  // which tile the library picks for a shape is in the measurements, not in an assumed ranking.
  for (int round = 0; round < 3; ++round) {
    for (GemmTile& tile : engine.tiles) {
      double efficiency = tile.efficiency, unused = 0;
      fit_two(aligned, predict, log_grid(0.02, 1.0, 80), {0.0}, [&](double a, double) { tile.efficiency = a; },
              efficiency, unused);
      tile.efficiency = efficiency;
    }
    double unused = 0;
    fit_two(aligned, predict, overhead_grid(), {0.0}, [&](double a, double) { engine.tile_overhead_s = a; }, overhead,
            unused);
    engine.tile_overhead_s = overhead;
  }
  for (size_t level = widest + 1; level < by_level.size(); ++level) {
    double& efficiency = engine.alignment[level].second;
    if (by_level[level].empty()) continue;  // unmeasured: the description's figure stays
    double fitted = efficiency, unused = 0;
    fit_two(by_level[level], predict, log_grid(0.02, 1.0, 120), {0.0}, [&](double a, double) { efficiency = a; },
            fitted, unused);
    efficiency = fitted;
  }
  return quality_of(samples, predict);
}

FitQuality fit_attention_engine(DTypePerformance& perf, const std::vector<AttentionMeasurement>& samples,
                                double launch_s) {
  if (samples.empty()) fail("no attention measurements to fit the attention engine to");
  std::vector<double> seconds;
  for (const AttentionMeasurement& s : samples) seconds.push_back(s.seconds);
  check_samples(seconds, "an attention");
  AttentionEngine& engine = perf.attention;
  std::function<double(const AttentionMeasurement&)> predict = [&](const AttentionMeasurement& s) {
    return launch_s + fused_attention_compute_seconds(s.shape, s.flops, perf);
  };
  std::vector<AttentionMeasurement> forward, backward;
  for (const AttentionMeasurement& s : samples) (s.shape.backward ? backward : forward).push_back(s);
  const std::vector<double> overheads = overhead_grid();
  double best = std::numeric_limits<double>::infinity();
  AttentionEngine fitted = engine;
  for (double overhead : overheads) {
    engine.tile_overhead_s = overhead;
    // Given the overhead, each pass's efficiency is fitted on its own samples.
    double loss = 0;
    for (auto [pass, efficiency] : {std::pair{&forward, &engine.forward_efficiency},
                                    std::pair{&backward, &engine.backward_efficiency}}) {
      if (pass->empty()) continue;
      double pass_best = std::numeric_limits<double>::infinity(), pass_efficiency = 1;
      for (double e : log_grid(0.01, 1.0, 100)) {
        *efficiency = e;
        double l = log_loss(*pass, predict);
        if (l < pass_best) pass_best = l, pass_efficiency = e;
      }
      *efficiency = pass_efficiency;
      loss += pass_best;
    }
    if (loss < best) best = loss, fitted = engine;
  }
  if (forward.empty()) fitted.forward_efficiency = fitted.backward_efficiency;
  if (backward.empty()) fitted.backward_efficiency = fitted.forward_efficiency;
  engine = fitted;
  return quality_of(samples, predict);
}

}  // namespace strata
