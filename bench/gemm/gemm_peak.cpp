// GEMM peak of this machine through oneDNN, the reference that MFU figures
// are quoted against: fp32 (dnnl_sgemm, what Strata's cpu backend calls) and
// bf16 (oneDNN matmul with fp32 accumulation), on square sizes and on the
// training shapes of a model given as --shapes M,N,K;... On a CPU where oneDNN
// makes no bf16 matmul (oneDNN 2.6 without AVX-512) the bf16 column is null in
// the JSON and "-" in the table, and stderr says why.
//
// Usage: strata-gemm-peak [--threads N] [--seconds S] [--shapes "2048,1152,384;..."] [--json]
#include <dnnl.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Shape3 {
  long m, n, k;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs `call` repeatedly for about `budget` seconds after one warm-up; returns the best GFLOP/s of 3 rounds.
template <typename Call>
double best_gflops(double flops, double budget, Call call) {
  call();
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    auto start = std::chrono::steady_clock::now();
    int calls = 0;
    do {
      call();
      ++calls;
    } while (seconds_since(start) < budget / 3);
    best = std::max(best, flops * calls / seconds_since(start) / 1e9);
  }
  return best;
}

double sgemm_gflops(Shape3 s, double budget) {
  std::vector<float> a(s.m * s.k, 0.5f), b(s.k * s.n, 0.25f), c(s.m * s.n);
  return best_gflops(2.0 * s.m * s.n * s.k, budget, [&] {
    dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.n, 0.0f, c.data(), s.n);
  });
}

// nullopt where oneDNN makes no bf16 matmul on this CPU.
std::optional<double> bf16_gflops(Shape3 s, double budget) {
  using namespace dnnl;
  engine cpu(engine::kind::cpu, 0);
  stream strm(cpu);
  memory::desc a_md({s.m, s.k}, memory::data_type::bf16, memory::format_tag::ab);
  memory::desc b_md({s.k, s.n}, memory::data_type::bf16, memory::format_tag::ab);
  memory::desc c_md({s.m, s.n}, memory::data_type::bf16, memory::format_tag::ab);
  matmul::primitive_desc pd;
  try {
    pd = matmul::primitive_desc(matmul::desc(a_md, b_md, c_md), cpu);
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "bf16 %ldx%ldx%ld: oneDNN makes no bf16 matmul on this CPU (%s)\n", s.m, s.n, s.k, e.what());
    return std::nullopt;
  }
  memory a(a_md, cpu), b(b_md, cpu), c(c_md, cpu);
  std::memset(a.get_data_handle(), 0x3f, a_md.get_size());
  std::memset(b.get_data_handle(), 0x3e, b_md.get_size());
  matmul prim(pd);
  std::string impl = pd.impl_info_str();
  double rate = best_gflops(2.0 * s.m * s.n * s.k, budget, [&] {
    prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    strm.wait();
  });
  std::fprintf(stderr, "bf16 %ldx%ldx%ld ran %s\n", s.m, s.n, s.k, impl.c_str());
  return rate;
}

std::vector<Shape3> parse_shapes(const char* text) {
  std::vector<Shape3> shapes;
  while (text && *text) {
    Shape3 s{};
    int used = 0;
    if (std::sscanf(text, "%ld,%ld,%ld%n", &s.m, &s.n, &s.k, &used) != 3 || s.m <= 0 || s.n <= 0 || s.k <= 0) {
      std::fprintf(stderr, "--shapes: expected M,N,K;M,N,K... with positive sizes, got '%s'\n", text);
      std::exit(2);
    }
    shapes.push_back(s);
    text += used;
    if (*text == ';') ++text;
  }
  return shapes;
}

}  // namespace

int main(int argc, char** argv) {
  double budget = 1.5;
  bool json = false;
  std::vector<Shape3> shapes = {{2048, 2048, 2048}, {4096, 4096, 1024}};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--threads" && i + 1 < argc) {
      omp_set_num_threads(std::atoi(argv[++i]));
    } else if (arg == "--seconds" && i + 1 < argc) {
      budget = std::atof(argv[++i]);
    } else if (arg == "--shapes" && i + 1 < argc) {
      std::vector<Shape3> extra = parse_shapes(argv[++i]);
      shapes.insert(shapes.end(), extra.begin(), extra.end());
    } else if (arg == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--seconds S] [--shapes \"M,N,K;...\"] [--json]\n", argv[0]);
      return 2;
    }
  }
  if (!json) std::printf("%8s %8s %8s %14s %14s %6s\n", "M", "N", "K", "fp32 GFLOP/s", "bf16 GFLOP/s", "ratio");
  std::string rows;
  for (const Shape3& s : shapes) {
    double f32 = sgemm_gflops(s, budget);
    std::optional<double> bf16 = bf16_gflops(s, budget);
    char bf16_text[32] = "null";
    if (bf16) std::snprintf(bf16_text, sizeof bf16_text, "%.1f", *bf16);
    if (json) {
      char row[200];
      std::snprintf(row, sizeof row, "%s{\"m\":%ld,\"n\":%ld,\"k\":%ld,\"fp32_gflops\":%.1f,\"bf16_gflops\":%s}",
                    rows.empty() ? "" : ",", s.m, s.n, s.k, f32, bf16_text);
      rows += row;
    } else if (bf16) {
      std::printf("%8ld %8ld %8ld %14.1f %14.1f %6.2f\n", s.m, s.n, s.k, f32, *bf16, *bf16 / f32);
    } else {
      std::printf("%8ld %8ld %8ld %14.1f %14s %6s\n", s.m, s.n, s.k, f32, "-", "-");
    }
  }
  if (json) std::printf("{\"threads\":%d,\"shapes\":[%s]}\n", omp_get_max_threads(), rows.c_str());
  return 0;
}
