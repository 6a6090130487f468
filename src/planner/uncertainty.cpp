#include "planner/uncertainty.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>

#include "core/error.h"

namespace strata {

namespace {

// A figure of the pricing, the description's keys it stands for, and how to make it worse by a signed fraction
// (negative: better).
struct Variation {
  UncertainFigure uncertain;
  std::function<void(ClusterSpec&, double)> vary;
};

double slower(double rate, double worse) { return rate * (1 - worse); }
double costlier(double cost, double worse) { return cost * (1 + worse); }

void vary_attention(AttentionEngine& engine, double worse) {
  engine.forward_efficiency = slower(engine.forward_efficiency, worse);
  engine.backward_efficiency = slower(engine.backward_efficiency, worse);
}

using EngineOf = std::function<DTypePerformance&(ClusterSpec&)>;

// A GEMM engine's figures under the description's `prefix` ("device.bf16."), named with `what` before them ("" or
// "float8 "): the peak, the tiles, their fixed cost, the narrower alignments and the sustained rate where given.
std::vector<Variation> gemm_variations(const std::string& prefix, const std::string& what, const EngineOf& engine,
                                       const DTypePerformance& performance) {
  std::vector<Variation> list = {
      {{what + "matrix peak", {prefix + "matrix_tflops"}},
       [=](ClusterSpec& c, double w) { engine(c).matrix_flops = slower(engine(c).matrix_flops, w); }},
      {{what + "GEMM tile efficiencies", {prefix + "gemm_tiles"}},
       [=](ClusterSpec& c, double w) {
         for (GemmTile& tile : engine(c).gemm.tiles) tile.efficiency = slower(tile.efficiency, w);
       }},
      {{what + "GEMM fixed cost per tile", {prefix + "gemm_tile_overhead_us"}},
       [=](ClusterSpec& c, double w) { engine(c).gemm.tile_overhead_s = costlier(engine(c).gemm.tile_overhead_s, w); }},
  };
  if (performance.gemm.alignment.size() > 1) {  // the widest runs at the tiles' rate; the narrower are figures
    list.push_back({{what + "GEMM efficiencies at narrower alignments", {prefix + "gemm_alignment"}},
                    [=](ClusterSpec& c, double w) {
                      auto& levels = engine(c).gemm.alignment;
                      for (size_t i = 1; i < levels.size(); ++i) levels[i].second = slower(levels[i].second, w);
                    }});
  }
  if (performance.sustained_matrix_flops > 0) {
    list.push_back({{what + "sustained matrix rate", {prefix + "sustained_matrix_tflops"}},
                    [=](ClusterSpec& c, double w) {
                      engine(c).sustained_matrix_flops = slower(engine(c).sustained_matrix_flops, w);
                    }});
  }
  return list;
}

// The matrix engine of the dtype the plans compute in, and the float8 engine when the linears run on it. A run
// calling another attention library is priced on that library's engine, whose figures are its own keys.
std::vector<Variation> engine_variations(const PlanningProblem& problem) {
  const DType dtype = problem.dtype;
  const std::string prefix = fmt::format("device.{}.", dtype_name(dtype));
  const std::string attention = problem.attention_library.empty()
                                    ? prefix
                                    : prefix + "attention_libraries." + problem.attention_library + ".";
  const EngineOf engine = [dtype](ClusterSpec& c) -> DTypePerformance& { return c.device.dtypes.at(dtype); };
  std::vector<Variation> list = gemm_variations(prefix, "", engine, problem.cluster.device.performance(dtype));
  list.push_back({{"attention efficiencies", {attention + "attention_efficiency", attention + "attention_backward_efficiency"}},
                  [=](ClusterSpec& c, double w) {
                    vary_attention(engine(c).attention, w);
                    for (auto& [name, library] : engine(c).attention_libraries) vary_attention(library, w);
                  }});
  list.push_back({{"attention fixed cost per tile", {attention + "attention_tile_overhead_us"}},
                  [=](ClusterSpec& c, double w) {
                    engine(c).attention.tile_overhead_s = costlier(engine(c).attention.tile_overhead_s, w);
                    for (auto& [name, library] : engine(c).attention_libraries) {
                      library.tile_overhead_s = costlier(library.tile_overhead_s, w);
                    }
                  }});
  if (problem.fp8 != Fp8Recipe::None) {
    const EngineOf fp8 = [](ClusterSpec& c) -> DTypePerformance& { return *c.device.fp8; };
    for (Variation& v : gemm_variations("device.fp8.", "float8 ", fp8, problem.cluster.device.fp8_performance())) {
      list.push_back(std::move(v));
    }
  }
  return list;
}

// The device's memory, launches and vector units (every dtype: the optimizer's f32 included) and the links.
std::vector<Variation> device_variations(const ClusterSpec& cluster) {
  std::vector<Variation> list = {
      {{"memory bandwidth reached", {"device.memory_bandwidth_gbps", "device.memory_efficiency"}},
       [](ClusterSpec& c, double w) { c.device.memory_bandwidth_Bps = slower(c.device.memory_bandwidth_Bps, w); }},
      {{"launch overhead", {"device.op_overhead_us"}},
       [](ClusterSpec& c, double w) { c.device.op_overhead_s = costlier(c.device.op_overhead_s, w); }},
  };
  for (const auto& [dtype, performance] : cluster.device.dtypes) {
    list.push_back({{fmt::format("vector peak ({})", dtype_name(dtype)),
                     {fmt::format("device.{}.vector_tflops", dtype_name(dtype))}},
                    [dtype = dtype](ClusterSpec& c, double w) {
                      DTypePerformance& p = c.device.dtypes.at(dtype);
                      p.vector_flops = slower(p.vector_flops, w);
                    }});
  }
  if (cluster.device.comm_compute_slowdown > 0) {
    list.push_back({{"compute slowdown beside collectives", {"device.comm_compute_slowdown"}},
                    [](ClusterSpec& c, double w) {
                      c.device.comm_compute_slowdown = costlier(c.device.comm_compute_slowdown, w);
                    }});
  }
  if (cluster.devices_per_node > 1) {
    list.push_back({{"intra-node bandwidth", {"intra_node.bandwidth_gbps"}},
                    [](ClusterSpec& c, double w) { c.intra_node.bandwidth_Bps = slower(c.intra_node.bandwidth_Bps, w); }});
    list.push_back({{"intra-node latency", {"intra_node.latency_us"}},
                    [](ClusterSpec& c, double w) { c.intra_node.latency_s = costlier(c.intra_node.latency_s, w); }});
  }
  if (cluster.nodes > 1) {
    list.push_back({{"network bandwidth", {"inter_node.nic_bandwidth_gbps"}},
                    [](ClusterSpec& c, double w) { c.nic.bandwidth_Bps = slower(c.nic.bandwidth_Bps, w); }});
    list.push_back({{"network latency", {"inter_node.latency_us"}},
                    [](ClusterSpec& c, double w) { c.nic.latency_s = costlier(c.nic.latency_s, w); }});
  }
  return list;
}

// The variations whose figures have an assumed key, each keeping only those keys.
std::vector<Variation> assumed_variations(const PlanningProblem& problem) {
  std::vector<Variation> all = engine_variations(problem);
  for (Variation& v : device_variations(problem.cluster)) all.push_back(std::move(v));
  const std::map<std::string, std::string>& sources = problem.cluster.figure_sources;
  std::vector<Variation> assumed;
  for (Variation& v : all) {
    std::vector<std::string> keys;
    for (const std::string& key : v.uncertain.keys) {
      auto found = sources.find(key);
      if (found == sources.end() || figure_basis(found->second) == FigureBasis::Assumed) keys.push_back(key);
    }
    if (keys.empty()) continue;
    v.uncertain.keys = std::move(keys);
    assumed.push_back(std::move(v));
  }
  return assumed;
}

std::vector<double> step_times(CostModel model, const std::vector<Prediction>& plans) {
  std::vector<double> steps;
  for (const Prediction& p : plans) steps.push_back(model.evaluate(p.plan, CostModel::PipelineTiming::Replayed).step_s);
  return steps;
}

}  // namespace

FigureBasis figure_basis(const std::string& source) {
  std::string text = source;
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  if (text.rfind("fitted by", 0) == 0 || text.rfind("measured", 0) == 0) return FigureBasis::Measured;
  if (text.find("assum") != std::string::npos) return FigureBasis::Assumed;
  for (const char* document : {"datasheet", "whitepaper", "user guide", "server guide", "soc description"}) {
    if (text.find(document) != std::string::npos) return FigureBasis::Specification;
  }
  return FigureBasis::Assumed;
}

std::vector<UncertainFigure> uncertain_figures(const PlanningProblem& problem) {
  std::vector<UncertainFigure> figures;
  for (const Variation& v : assumed_variations(problem)) figures.push_back(v.uncertain);
  return figures;
}

bool intervals_overlap(const StepInterval& a, const StepInterval& b) {
  return std::max(a.low_s, b.low_s) <= std::min(a.high_s, b.high_s);
}

bool order_holds(const StepIntervals& intervals, const std::vector<Prediction>& plans, size_t i) {
  return std::fabs(plans.at(i).step_s - plans.front().step_s) > intervals.gap_closing_s.at(i);
}

StepIntervals step_intervals(const CostModel& model, const std::vector<Prediction>& plans, double range) {
  if (!(range >= 0 && range < 1)) fail("the assumed figures' uncertainty must be in [0, 1), got {}", range);
  StepIntervals out{range, {}, {}};
  std::vector<double> slowdown(plans.size(), 0.0);
  std::vector<double> speedup(plans.size(), 0.0);
  out.gap_closing_s.assign(plans.size(), 0.0);
  const std::vector<Variation> variations = assumed_variations(model.problem());
  const std::vector<double> base = range > 0 && !variations.empty()
                                        ? step_times(model.with_cluster(model.problem().cluster), plans)
                                        : std::vector<double>(plans.size(), 0.0);
  for (const Variation& v : variations) {
    out.figures.push_back(v.uncertain);
    if (range == 0) continue;
    std::vector<double> up(plans.size(), 0.0);
    std::vector<double> down(plans.size(), 0.0);
    std::vector<double> closing(plans.size(), 0.0);
    for (double worse : {range, -range}) {
      ClusterSpec cluster = model.problem().cluster;
      v.vary(cluster, worse);
      const std::vector<double> steps = step_times(model.with_cluster(std::move(cluster)), plans);
      for (size_t i = 0; i < plans.size(); ++i) {
        up[i] = std::max(up[i], steps[i] - base[i]);
        down[i] = std::max(down[i], base[i] - steps[i]);
        // The change of plan i's gap to plan 0, towards the other's side.
        const double change = (steps[i] - steps[0]) - (base[i] - base[0]);
        closing[i] = std::max(closing[i], base[i] >= base[0] ? -change : change);
      }
    }
    for (size_t i = 0; i < plans.size(); ++i) {
      slowdown[i] += up[i];
      speedup[i] += down[i];
      out.gap_closing_s[i] += closing[i];
    }
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    out.plans.push_back({plans[i].step_s - speedup[i], plans[i].step_s + slowdown[i]});
  }
  return out;
}

}  // namespace strata
