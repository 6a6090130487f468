#include "planner/calibrate.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <set>

#include "backends/backends.h"
#include "comm/probe.h"
#include "core/error.h"
#include "graph/executor.h"
#include "model/model_graph.h"
#include "model/parameters.h"
#include "planner/device_time.h"

namespace strata {

namespace {

// The fastest of at least three timed calls after a warm-up, calling again
// while the budget lasts (at most 40 calls): the machine's capability, not
// its neighbours' load at the moment. A call is timed until `device` has run it.
template <typename Fn>
double best_seconds(const Fn& call, double budget_s, const Device& device) {
  call();
  device.synchronize();
  std::vector<double> times;
  auto begin = std::chrono::steady_clock::now();
  while (times.size() < 3 ||
         (times.size() < 40 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() < budget_s)) {
    auto start = std::chrono::steady_clock::now();
    call();
    device.synchronize();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return *std::min_element(times.begin(), times.end());
}

// Small deterministic values: no denormals, no overflow in GELU or softmax; on `device`.
Tensor filled(const Shape& shape, DType dtype, const Device& device) {
  Tensor values = Tensor::empty(shape, DType::F32);
  float* data = values.data<float>();
  for (int64_t i = 0; i < values.numel(); ++i) data[i] = 0.01f * static_cast<float>(i % 17) - 0.08f;
  return (dtype == DType::F32 ? values : values.to(dtype)).to_device(device);
}

struct CalibrationGemm {
  int64_t m, k, n;  // out [m, n] from [m, k] x [k, n]; with trans_a: out [k, n] from [m, k]^T [m, n]
  bool trans_a, trans_b;
};

// The GEMMs of GPT layers from small to GPT-2-small width: forward projections,
// an input gradient (trans_b) and a weight gradient (trans_a) of c_attn.
constexpr CalibrationGemm kGemms[] = {
    {64, 64, 192, false, false},     {256, 128, 384, false, false},   {512, 256, 768, false, false},
    {1024, 384, 1152, false, false}, {1024, 1152, 384, false, true},  {1024, 384, 1152, true, false},
    {1024, 1536, 384, false, false}, {2048, 768, 2304, false, false},
};

struct CalibrationAttention {
  int64_t batch, seq, width, heads;
};
constexpr CalibrationAttention kAttention[] = {
    {1, 64, 128, 4}, {4, 128, 256, 4}, {4, 256, 384, 6}, {2, 512, 768, 12}, {1, 1024, 768, 12}};

KernelSample time_gemm(Dispatcher& dispatcher, const CalibrationGemm& g, DType dtype, double budget) {
  const Device& device = dispatcher.backend().device();
  Tensor a = filled({g.m, g.k}, dtype, device);
  Tensor b = filled(g.trans_a ? Shape{g.m, g.n} : g.trans_b ? Shape{g.n, g.k} : Shape{g.k, g.n}, dtype, device);
  Attrs attrs{{"trans_a", g.trans_a}, {"trans_b", g.trans_b}};
  Tensor out = Tensor::empty(g.trans_a ? Shape{g.k, g.n} : Shape{g.m, g.n}, dtype, device);
  KernelSample sample;
  sample.op = "matmul";
  // As the matrix engine sees it: out [m, n] = [m, k] x [k, n] (a weight gradient reduces over the rows).
  sample.dims = g.trans_a ? std::vector<int64_t>{g.k, g.n, g.m, 1, 0} : std::vector<int64_t>{g.m, g.n, g.k, 0, g.trans_b};
  sample.flops = OpRegistry::global().cost("matmul", metas_of({a, b}), attrs).flops;
  sample.seconds = best_seconds([&] { dispatcher.run("matmul", {a, b}, {out}, attrs); }, budget, device);
  return sample;
}

KernelSample time_attention(Dispatcher& dispatcher, const CalibrationAttention& s, DType dtype, double budget) {
  const Device& device = dispatcher.backend().device();
  Tensor qkv = filled({s.batch, s.seq, 3 * s.width}, dtype, device);
  Attrs attrs{{"n_head", s.heads}};
  Tensors outputs = dispatcher.call("attention", {qkv}, attrs);
  KernelSample sample{"attention",
                      {s.batch, s.seq, s.width, s.heads},
                      OpRegistry::global().cost("attention", metas_of({qkv}), attrs).flops,
                      0};
  sample.seconds = best_seconds([&] { dispatcher.run("attention", {qkv}, outputs, attrs); }, budget, device);
  return sample;
}

// The small GPT-2 the graph pass runs.
ModelConfig calibration_model() {
  ModelConfig config;
  config.n_layer = 2;
  config.n_head = 4;
  config.n_embd = 256;
  config.vocab_size = 4096;
  config.block_size = 128;
  return config;
}
constexpr int64_t kCalibrationBatch = 8;

std::set<std::string> training_graph_ops() {
  ModelGraph model = build_model_graph(calibration_model(), 1, 8, true);
  std::set<std::string> ops;
  for (const Node& node : model.graph.nodes()) ops.insert(node.op);
  return ops;
}

// Every op as a training graph runs it (a small GPT-2: real shapes, and
// inputs another op just wrote): per op name, the time predicted from the
// micro-benchmark figures over the fastest time measured in the graph.
std::map<std::string, double> measure_op_efficiency(Dispatcher& dispatcher, DType dtype, const ThreadProfile& measured,
                                                    const DTypePerformance& performance, double budget) {
  const ModelConfig config = calibration_model();
  const int64_t batch = kCalibrationBatch;
  // As training runs it: f32 master weights, the default mixed-precision policy (the lookups,
  // norms, softmax and loss stay in f32; those nodes are timed in the f32 pass, not here).
  ModelBuildOptions options;
  if (dtype != DType::F32) {
    options.precision = PrecisionPolicy::parse(std::string(dtype_name(dtype)), default_fp32_ops(), "");
  }
  ModelGraph model = build_model_graph(config, batch, config.block_size, true, options);
  std::set<int> kept{model.loss};
  for (const auto& [param, grad] : model.grads.of) kept.insert(grad);
  CompiledGraph graph(model.graph, dispatcher, kept);
  const Device& runs_on = dispatcher.backend().device();
  ParameterSet params(model_param_specs(config), runs_on);
  params.initialise(CounterRng(1));
  std::vector<Tensor> bound;
  for (size_t i = 0; i < params.size(); ++i) {
    bound.push_back(params.tensor(i));
    graph.bind(model.params[i], bound.back());
  }
  Tensor tokens = Tensor::zeros({batch, config.block_size}, DType::I32, runs_on);
  Tensor targets = Tensor::zeros({batch, config.block_size}, DType::I32, runs_on);
  Tensor positions = position_ids(config.block_size).to_device(runs_on);
  const TensorMeta& loss = model.graph.value(model.loss).meta;
  Tensor seed = filled(loss.shape, loss.dtype, runs_on);
  graph.bind(model.tokens, tokens);
  graph.bind(model.targets, targets);
  graph.bind(model.positions, positions);
  graph.bind(model.grads.seed, seed);
  graph.run();
  graph.enable_profiling(true);
  const size_t nodes = static_cast<size_t>(model.graph.num_nodes());
  std::vector<double> fastest(nodes, 0), before(nodes, 0);
  auto begin = std::chrono::steady_clock::now();
  for (int round = 0;
       round < 3 ||
       (round < 20 && std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() < budget);
       ++round) {
    for (size_t i = 0; i < nodes; ++i) before[i] = graph.timings()[i].seconds;
    graph.run();
    for (size_t i = 0; i < nodes; ++i) {
      double seconds = graph.timings()[i].seconds - before[i];
      fastest[i] = round == 0 ? seconds : std::min(fastest[i], seconds);
    }
  }
  DeviceSpec device;
  device.memory_bandwidth_Bps = measured.memory_bandwidth_Bps;
  device.op_overhead_s = measured.op_overhead_s;
  device.dtypes[dtype] = performance;
  std::map<std::string, std::pair<double, double>> totals;  // predicted, measured
  for (size_t i = 0; i < nodes; ++i) {
    int id = static_cast<int>(i);
    const Node& node = model.graph.node(id);
    if (node.outputs.empty() || model.graph.value(node.outputs.front()).meta.dtype != dtype) continue;
    totals[model.graph.node(id).op].first += op_seconds(op_work(model.graph, id), device, dtype);
    totals[model.graph.node(id).op].second += fastest[i];
  }
  std::map<std::string, double> efficiency;
  for (const auto& [op, pair] : totals) {
    if (pair.second > 0) efficiency[op] = pair.first / pair.second;
  }
  return efficiency;
}

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown cpu";
}

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

}  // namespace

HardwareProfile calibrate_compute(const CalibrationOptions& options, const ProgressFn& progress,
                                  std::vector<std::string>& skipped) {
  HardwareProfile profile;
  profile.cpu = cpu_model_name();
  profile.cores = omp_get_num_procs();
  profile.memory_bytes = physical_memory_bytes();
  profile.backend = options.backend;
  std::vector<int> thread_counts = options.threads;
  if (thread_counts.empty()) {
    thread_counts = {1};
    if (profile.cores > 1) thread_counts.push_back(profile.cores);
  }
  std::sort(thread_counts.begin(), thread_counts.end());
  thread_counts.erase(std::unique(thread_counts.begin(), thread_counts.end()), thread_counts.end());
  for (int threads : thread_counts) {
    if (threads < 1) fail("--threads: thread counts must be at least 1, got {}", threads);
  }

  const Backend& backend = get_backend(options.backend);
  std::vector<DType> dtypes;
  for (DType dtype : options.dtypes) {
    std::vector<std::string> missing;
    for (const std::string& op : training_graph_ops()) {
      if (backend.find(op, dtype) == nullptr) missing.push_back(op);
    }
    if (missing.empty()) {
      dtypes.push_back(dtype);
    } else {
      std::string ops;
      for (const std::string& op : missing) ops += (ops.empty() ? "" : ", ") + op;
      skipped.push_back(fmt::format("{}: backend '{}' has no native {} kernel for {}", dtype_name(dtype),
                                    options.backend, ops, dtype_name(dtype)));
    }
  }
  if (dtypes.empty()) fail("backend '{}' has native kernels for none of the requested dtypes", options.backend);

  auto dispatcher = make_dispatcher(options.backend, FallbackPolicy::Error);
  // Allocated once: first touches of fresh memory are slow on some machines.
  const int64_t stream_elements = int64_t{8} << 20;
  const Device& device = dispatcher->backend().device();
  Tensor x = filled({stream_elements}, DType::F32, device), y = filled({stream_elements}, DType::F32, device);
  Tensor sum = Tensor::empty({stream_elements}, DType::F32, device);
  Tensor tiny = filled({16}, DType::F32, device), tiny_out = Tensor::empty({16}, DType::F32, device);
  const int saved_threads = omp_get_max_threads();
  for (int threads : thread_counts) {
    omp_set_num_threads(threads);
    ThreadProfile measured;
    measured.threads = threads;
    double add_bytes = OpRegistry::global().cost("add", metas_of({x, y}), {}).bytes;
    measured.memory_bandwidth_Bps = add_bytes / best_seconds(
                                                    [&] {
                                                      dispatcher->run("add", {x, y}, {sum});
                                                    },
                                                    options.seconds_per_kernel, device);
    measured.op_overhead_s = best_seconds([&] { dispatcher->run("add", {tiny, tiny}, {tiny_out}); }, 0.02, device);
    progress(fmt::format("{} thread(s): memory bandwidth {:.1f} GB/s, op overhead {:.1f} us", threads,
                         measured.memory_bandwidth_Bps / 1e9, measured.op_overhead_s * 1e6));
    for (DType dtype : dtypes) {
      DTypeProfile d;
      for (const CalibrationGemm& g : kGemms) d.gemm.push_back(time_gemm(*dispatcher, g, dtype, options.seconds_per_kernel));
      for (const CalibrationAttention& s : kAttention) {
        d.attention.push_back(time_attention(*dispatcher, s, dtype, options.seconds_per_kernel));
      }
      Tensor activations = filled({int64_t{1} << 20}, dtype, device);
      Tensor gelu_out = Tensor::empty(activations.shape(), dtype, device);
      double gelu_flops = OpRegistry::global().cost("gelu", metas_of({activations}), {}).flops;
      d.vector_flops = gelu_flops / best_seconds([&] { dispatcher->run("gelu", {activations}, {gelu_out}); },
                                                 options.seconds_per_kernel, device);
      d.op_efficiency = measure_op_efficiency(*dispatcher, dtype, measured, performance_of(d, threads, measured.op_overhead_s, "calibration"),
                                              10 * options.seconds_per_kernel);
      double best = 0;
      for (const KernelSample& s : d.gemm) best = std::max(best, s.flops / s.seconds);
      progress(fmt::format("{} thread(s), {}: GEMM up to {:.1f} GFLOP/s, attention {:.1f} GFLOP/s, GELU {:.2f} GFLOP/s",
                           threads, dtype_name(dtype), best / 1e9,
                           d.attention.back().flops / d.attention.back().seconds / 1e9, d.vector_flops / 1e9));
      measured.dtypes[dtype] = std::move(d);
    }
    profile.threads.push_back(std::move(measured));
  }
  omp_set_num_threads(saved_threads);
  return profile;
}

LinkProfile calibrate_links(comm::Communicator& world) {
  if (world.size() < 2) fail("measuring links needs at least 2 processes (run under mpirun -np 2)");
  comm::ClusterDescription measured = comm::probe_links(world);
  const comm::TopologyDesc& topology = measured.topology;
  LinkProfile links;
  links.ranks = world.size();
  links.nodes = topology.nodes;
  links.intra_latency_s = topology.intra.latency_s;
  links.intra_bandwidth_Bps = topology.intra.bandwidth_Bps;
  if (topology.nodes > 1) {
    links.inter_latency_s = topology.inter.latency_s;
    links.inter_bandwidth_Bps = topology.inter.bandwidth_Bps;
  }
  links.reduce_Bps = topology.reduce_Bps;
  return links;
}

}  // namespace strata
