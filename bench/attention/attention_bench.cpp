// Times the cpu backend's causal attention kernels, forward and backward, on
// the attention shapes of the bench models (configs/bench/): packed
// `attention` for the GPT-2 models, `grouped_attention` for the LLaMA ones,
// one layer's call at the model's sequence and rows per step. Prints the
// fastest call and the rate in causal FLOPs (the products that
// the mask keeps: 2 per multiply-add, Q K^T and P V forward, five products
// backward), so kernel changes can be compared without a training run.
//
// Usage: strata-attention-bench [--dtype bf16|f32] [--seconds S] [--threads N] [--cpu-time] [--model NAME]
//   --cpu-time: time calls by the process's CPU time per thread instead of
//   the wall clock; with one thread, immune to other load taking the core
//   (not to what it does to the caches).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backends/backends.h"
#include "core/rng.h"

namespace {

using namespace strata;

struct AttentionShape {
  const char* model;
  int64_t batch, seq, heads, kv_heads, head_dim;
};

// The bench models' attention (bench/README.md's table).
const AttentionShape kShapes[] = {
    {"small", 8, 256, 6, 6, 64},        {"gpt2_small", 1, 1024, 12, 12, 64}, {"llama_small", 8, 256, 4, 2, 64},
    {"smollm_135m", 2, 512, 9, 3, 64},
};

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype) {
  Tensor tensor = Tensor::empty(shape, DType::F32);
  fill_normal(tensor.data<float>(), tensor.numel(), CounterRng(seed), 0, 0.0f, 1.0f);
  return tensor.to(dtype);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The process's CPU time: with one thread, what a call took while it ran.
double cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// The fastest single call over about `budget` seconds of calls, after one
// warm-up call: on a shared machine the minimum is the call that ran alone.
// By the wall clock, or (cpu_time) by the process's CPU time per thread.
template <typename Call>
double best_seconds(double budget, bool cpu_time, Call call) {
  call();
  double best = 1e30;
  const auto start = std::chrono::steady_clock::now();
  do {
    const auto before = std::chrono::steady_clock::now();
    const double cpu_before = cpu_seconds();
    call();
    const double took = cpu_time ? (cpu_seconds() - cpu_before) / omp_get_max_threads() : seconds_since(before);
    best = std::min(best, took);
  } while (seconds_since(start) < budget);
  return best;
}

void bench(Dispatcher& cpu, const AttentionShape& s, DType dtype, double budget, bool cpu_time) {
  const bool grouped = s.kv_heads != s.heads;
  const int64_t width = s.heads * s.head_dim, kv_width = s.kv_heads * s.head_dim;
  Tensor dout = random_tensor({s.batch, s.seq, width}, 4, dtype);
  Tensors inputs;
  Attrs attrs{{"n_head", s.heads}};
  if (grouped) {
    attrs.set("n_kv_head", s.kv_heads);
    inputs = {random_tensor({s.batch, s.seq, width}, 1, dtype), random_tensor({s.batch, s.seq, kv_width}, 2, dtype),
              random_tensor({s.batch, s.seq, kv_width}, 3, dtype)};
  } else {
    inputs = {random_tensor({s.batch, s.seq, 3 * width}, 1, dtype)};
  }
  const std::string op = grouped ? "grouped_attention" : "attention";
  Tensors forward = cpu.call(op, inputs, attrs);
  Tensors backward_inputs{dout};
  backward_inputs.insert(backward_inputs.end(), inputs.begin(), inputs.end());
  backward_inputs.insert(backward_inputs.end(), forward.begin(), forward.end());
  Tensors grads = cpu.call(op + "_backward", backward_inputs, attrs);
  const double forward_s = best_seconds(budget / 2, cpu_time, [&] { cpu.run(op, inputs, forward, attrs); });
  const double backward_s = best_seconds(budget / 2, cpu_time, [&] { cpu.run(op + "_backward", backward_inputs, grads, attrs); });
  // One causal product: batch * heads * (seq^2 / 2) multiply-adds of depth head_dim.
  const double product = static_cast<double>(s.batch * s.heads) * s.seq * s.seq * s.head_dim;
  std::printf("%-12s %-18s B=%-2lld T=%-5lld H=%-3lld KV=%-3lld D=%-3lld  forward %7.3f ms %6.0f GFLOP/s  "
              "backward %7.3f ms %6.0f GFLOP/s\n",
              s.model, op.c_str(), static_cast<long long>(s.batch), static_cast<long long>(s.seq),
              static_cast<long long>(s.heads), static_cast<long long>(s.kv_heads), static_cast<long long>(s.head_dim),
              forward_s * 1e3, 2 * product / forward_s / 1e9, backward_s * 1e3, 5 * product / backward_s / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  DType dtype = DType::BF16;
  double seconds = 2.0;
  bool cpu_time = false;
  std::string model;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dtype" && i + 1 < argc) {
      const std::string name = argv[++i];
      if (name != "bf16" && name != "f32") {
        std::fprintf(stderr, "--dtype: '%s' is not bf16 or f32\n", name.c_str());
        return 2;
      }
      dtype = name == "bf16" ? DType::BF16 : DType::F32;
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (arg == "--threads" && i + 1 < argc) {
      omp_set_num_threads(std::atoi(argv[++i]));
    } else if (arg == "--cpu-time") {
      cpu_time = true;
    } else if (arg == "--model" && i + 1 < argc) {
      model = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--dtype bf16|f32] [--seconds S] [--threads N] [--cpu-time] [--model NAME]\n",
                   argv[0]);
      return 2;
    }
  }
  auto cpu = make_dispatcher("cpu", FallbackPolicy::Error);
  std::printf("%s, %d threads, fastest call by %s\n", std::string(dtype_name(dtype)).c_str(), omp_get_max_threads(),
              cpu_time ? "CPU time per thread" : "the wall clock");
  for (const AttentionShape& shape : kShapes) {
    if (model.empty() || model == shape.model) bench(*cpu, shape, dtype, seconds, cpu_time);
  }
  return 0;
}
