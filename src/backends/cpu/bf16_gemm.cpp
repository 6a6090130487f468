#include "backends/cpu/bf16_gemm.h"

#include <omp.h>

#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "backends/cpu/scratch.h"
#include "core/error.h"

namespace strata::cpu {

namespace {

using dnnl::memory;

struct GemmKey {
  int64_t m, n, k;
  bool trans_a, trans_b, bias;
  int threads;
  auto tie() const { return std::tie(m, n, k, trans_a, trans_b, bias, threads); }
  bool operator<(const GemmKey& other) const { return tie() < other.tie(); }
};

struct GemmPlan {
  memory::desc a, b, bias, c, scratchpad;
  dnnl::matmul primitive;
};

// The call-scratch slot holding oneDNN's scratchpad. Left to oneDNN, the
// scratchpad is malloc'ed per execution and the heap needs several training
// steps to settle (fresh pages are slow to touch here); a kept buffer avoids it.
constexpr int kScratchpadSlot = 7;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Transposed operands are described by their strides (format tag ba), so
// nothing is copied here; oneDNN's brgemm packs blocks as it goes.
GemmPlan make_plan(const GemmKey& key) {
  using tag = memory::format_tag;
  using type = memory::data_type;
  GemmPlan plan;
  plan.a = memory::desc({key.m, key.k}, type::bf16, key.trans_a ? tag::ba : tag::ab);
  plan.b = memory::desc({key.k, key.n}, type::bf16, key.trans_b ? tag::ba : tag::ab);
  plan.c = memory::desc({key.m, key.n}, type::bf16, tag::ab);
  if (key.bias) plan.bias = memory::desc({1, key.n}, type::bf16, tag::ab);
  dnnl::matmul::desc desc = key.bias ? dnnl::matmul::desc(plan.a, plan.b, plan.bias, plan.c)
                                     : dnnl::matmul::desc(plan.a, plan.b, plan.c);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc primitive_desc(desc, attr, cpu_engine());
  plan.scratchpad = primitive_desc.scratchpad_desc();
  plan.primitive = dnnl::matmul(primitive_desc);
  return plan;
}

const GemmPlan& plan_for(const GemmKey& key) {
  static std::mutex mutex;
  static std::map<GemmKey, GemmPlan> plans;  // node-based: references stay valid
  std::lock_guard<std::mutex> lock(mutex);
  auto found = plans.find(key);
  if (found == plans.end()) found = plans.emplace(key, make_plan(key)).first;
  return found->second;
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a, const bf16* b,
               const bf16* bias, bf16* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: only the bias is left
    for (int64_t i = 0; i < m * n; ++i) c[i] = bias == nullptr ? bf16{} : bias[i % n];
    return;
  }
  GemmKey key{m, n, k, trans_a, trans_b, bias != nullptr, omp_get_max_threads()};
  try {
    const GemmPlan& plan = plan_for(key);
    dnnl::engine& engine = cpu_engine();
    auto handle = [](const bf16* data) { return const_cast<bf16*>(data); };  // oneDNN only reads inputs
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, memory(plan.a, engine, handle(a))},
        {DNNL_ARG_WEIGHTS, memory(plan.b, engine, handle(b))},
        {DNNL_ARG_DST, memory(plan.c, engine, c)},
    };
    if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, memory(plan.bias, engine, handle(bias)));
    if (size_t bytes = plan.scratchpad.get_size(); bytes > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(plan.scratchpad, engine, call_scratch_bytes(kScratchpadSlot, bytes)));
    }
    dnnl::stream stream(engine);
    plan.primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& error) {
    fail("oneDNN bf16 matmul failed for m={} n={} k={} trans_a={} trans_b={}: {}", m, n, k, trans_a, trans_b,
         error.what());
  }
}

}  // namespace strata::cpu
