#include "backends/cpu/bf16_gemm.h"

#include <omp.h>

#include <algorithm>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "backends/cpu/bf16_gemm_f32.h"
#include "backends/cpu/convert.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "core/error.h"

namespace strata::cpu {

namespace {

using dnnl::memory;

// One oneDNN product: C[m, n] = A[m, k] B[k, n] (+ bias), operands in place
// with leading dimensions lda, ldb, ldc (A stored as its transpose [k, m]
// when trans_a, B as [n, k] when trans_b). `f32_out` writes C in f32 instead
// of bf16; `accumulate` adds the product to what C holds (oneDNN's sum
// post-op). A `runtime` dimension is left to execution (its size in the key
// is 0): one primitive serves every size of it.
struct GemmKey {
  int64_t m, n, k;
  bool trans_a, trans_b;
  int64_t lda, ldb, ldc;
  bool bias, f32_out, accumulate;
  int threads;
  GemmRuntimeDim runtime = GemmRuntimeDim::None;
  auto tie() const {
    return std::tie(m, n, k, trans_a, trans_b, lda, ldb, ldc, bias, f32_out, accumulate, threads, runtime);
  }
  bool operator<(const GemmKey& other) const { return tie() < other.tie(); }
};

struct GemmPlan {
  memory::desc a, b, bias, c, scratchpad;
  dnnl::matmul primitive;
};

// The call-scratch slots holding oneDNN's scratchpad and the f32 sums of a
// product split along k. Left to oneDNN, the scratchpad is malloc'ed per
// execution and the heap needs several training steps to settle (fresh pages
// are slow to touch here); a kept buffer avoids it.
constexpr int kScratchpadSlot = 7;
constexpr int kSumsSlot = 6;
constexpr int kRuntimeSumsSlot = 7;  // thread scratch: gemm_bf16_runtime's f32 sums

// Products far longer in k than wide (the LM head's input gradient: k is the
// vocabulary) are summed in chunks of kChunkK into f32: oneDNN re-streams all
// of B for every block of A's rows, and chunks keep B's part small; measured
// 1.3-2.6x faster on the LM heads of GPT-2 and SmolLM (k 49152 and 50257).
constexpr int64_t kChunkK = 4096;
constexpr int64_t kLongKRatio = 8;  // chunked when k >= 4 chunks and >= this times m and n

// Tall products with A transposed (the LM head's weight gradient: m is the
// vocabulary) run as blocks of kChunkRows output rows: measured 1.2-1.6x.
constexpr int64_t kChunkRows = 2048;
constexpr int64_t kTallRows = 8 * kChunkRows;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

struct OperandDescs {
  memory::desc a, b, c;
};

// Operands are described by their strides, so nothing is copied here;
// oneDNN's brgemm packs blocks as it goes.
OperandDescs operand_descs(const GemmKey& key, int64_t m, int64_t k) {
  using type = memory::data_type;
  return {memory::desc({m, k}, type::bf16, key.trans_a ? memory::dims{1, key.lda} : memory::dims{key.lda, 1}),
          memory::desc({k, key.n}, type::bf16, key.trans_b ? memory::dims{1, key.ldb} : memory::dims{key.ldb, 1}),
          memory::desc({m, key.n}, key.f32_out ? type::f32 : type::bf16, memory::dims{key.ldc, 1})};
}

GemmPlan make_plan(const GemmKey& key) {
  GemmPlan plan;
  const int64_t m = key.runtime == GemmRuntimeDim::M ? DNNL_RUNTIME_DIM_VAL : key.m;
  const int64_t k = key.runtime == GemmRuntimeDim::K ? DNNL_RUNTIME_DIM_VAL : key.k;
  const OperandDescs descs = operand_descs(key, m, k);
  plan.a = descs.a, plan.b = descs.b, plan.c = descs.c;
  if (key.bias) plan.bias = memory::desc({1, key.n}, memory::data_type::bf16, memory::format_tag::ab);
  dnnl::matmul::desc desc = key.bias ? dnnl::matmul::desc(plan.a, plan.b, plan.bias, plan.c)
                                     : dnnl::matmul::desc(plan.a, plan.b, plan.c);
  dnnl::primitive_attr attr;
  // A primitive with a runtime dimension cannot size its scratchpad in advance: oneDNN allocates it.
  if (key.runtime == GemmRuntimeDim::None) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  dnnl::matmul::primitive_desc primitive_desc(desc, attr, cpu_engine());
  if (key.runtime == GemmRuntimeDim::None) plan.scratchpad = primitive_desc.scratchpad_desc();
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

// Whether oneDNN makes bf16 matmuls on this CPU (2.6 makes them only with AVX-512), asked once by making a small
// one; where it does not, the products run through f32 (bf16_gemm_f32.h), said once in the log.
bool onednn_makes_bf16_matmul() {
  static const bool makes = [] {
    try {
      make_plan(GemmKey{.m = 16, .n = 16, .k = 16, .trans_a = false, .trans_b = false, .lda = 16, .ldb = 16,
                        .ldc = 16, .bias = false, .f32_out = false, .accumulate = false, .threads = 1});
      return true;
    } catch (const dnnl::error& error) {
      spdlog::info("cpu backend: oneDNN makes no bf16 matmul on this CPU ({}); bf16 products run on the f32 "
                   "sgemm with their operands widened (exact products, f32 sums, one rounding, as natively)",
                   error.what());
      return false;
    }
  }();
  return makes;
}

// `m` and `k`: the sizes of this execution (the key's, but for a runtime dimension).
void run(const GemmKey& key, const bf16* a, const bf16* b, const bf16* bias, void* c, int64_t m, int64_t k) {
  try {
    const GemmPlan& plan = plan_for(key);
    dnnl::engine& engine = cpu_engine();
    auto handle = [](const bf16* data) { return const_cast<bf16*>(data); };  // oneDNN only reads inputs
    const OperandDescs descs = key.runtime == GemmRuntimeDim::None ? OperandDescs{plan.a, plan.b, plan.c}
                                                                   : operand_descs(key, m, k);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, memory(descs.a, engine, handle(a))},
        {DNNL_ARG_WEIGHTS, memory(descs.b, engine, handle(b))},
        {DNNL_ARG_DST, memory(descs.c, engine, c)},
    };
    if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, memory(plan.bias, engine, handle(bias)));
    if (size_t bytes = plan.scratchpad.get_size(); bytes > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(plan.scratchpad, engine, call_scratch_bytes(kScratchpadSlot, bytes)));
    }
    dnnl::stream stream(engine);
    plan.primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& error) {
    fail("oneDNN bf16 matmul failed for m={} n={} k={} trans_a={} trans_b={}: {}", m, key.n, k, key.trans_a,
         key.trans_b, error.what());
  }
}

void run(const GemmKey& key, const bf16* a, const bf16* b, const bf16* bias, void* c) {
  run(key, a, b, bias, c, key.m, key.k);
}

// k in fixed chunks (the same for any thread count, so the bits are too):
// the first chunk's product is written to f32 sums, the others added to
// them, and the sums rounded to bf16 once at the end.
void gemm_long_k(GemmKey key, const bf16* a, const bf16* b, const bf16* bias, bf16* c) {
  const int64_t m = key.m, n = key.n, k = key.k;
  float* sums = call_scratch<float>(kSumsSlot, static_cast<size_t>(m * n));
  key.bias = false;
  key.f32_out = true;
  key.ldc = n;
  for (int64_t start = 0; start < k; start += kChunkK) {
    GemmKey chunk = key;
    chunk.k = std::min(kChunkK, k - start);
    chunk.accumulate = start > 0;
    const bf16* a_chunk = a + (key.trans_a ? start * key.lda : start);
    const bf16* b_chunk = b + (key.trans_b ? start : start * key.ldb);
    run(chunk, a_chunk, b_chunk, nullptr, sums);
  }
  round_rows(sums, bias, c, m, n);
}

// Output rows in blocks: each block reads its own columns of the stored A^T.
void gemm_tall_transposed_a(const GemmKey& key, const bf16* a, const bf16* b, const bf16* bias, bf16* c) {
  for (int64_t start = 0; start < key.m; start += kChunkRows) {
    GemmKey block = key;
    block.m = std::min(kChunkRows, key.m - start);
    run(block, a + start, b, bias, c + start * key.ldc);
  }
}

}  // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const bf16* a, const bf16* b,
               const bf16* bias, bf16* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: only the bias is left
    for (int64_t i = 0; i < m * n; ++i) c[i] = bias == nullptr ? bf16{} : bias[i % n];
    return;
  }
  if (!onednn_makes_bf16_matmul()) {
    return gemm_bf16_through_f32(trans_a, trans_b, m, n, k, a, b, bias, c, WideningScratch::Call);
  }
  GemmKey key{.m = m, .n = n, .k = k, .trans_a = trans_a, .trans_b = trans_b,
              .lda = trans_a ? m : k, .ldb = trans_b ? k : n, .ldc = n,
              .bias = bias != nullptr, .f32_out = false, .accumulate = false, .threads = omp_get_max_threads()};
  if (k >= 4 * kChunkK && k >= kLongKRatio * std::max(m, n)) return gemm_long_k(key, a, b, bias, c);
  if (trans_a && m >= kTallRows) return gemm_tall_transposed_a(key, a, b, bias, c);
  run(key, a, b, bias, c);
}

void gemm_bf16_runtime(GemmRuntimeDim runtime, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       const bf16* a, const bf16* b, bf16* c) {
  // The leading dimensions must not depend on the runtime size: a stored [m, k] (not transposed) for a
  // runtime m, a^T [k, m] and b [k, n] for a runtime k.
  STRATA_CHECK(runtime != GemmRuntimeDim::None && (runtime == GemmRuntimeDim::M ? !trans_a : trans_a && !trans_b),
               "gemm_bf16_runtime: a runtime {} with trans_a={} trans_b={} has a leading dimension that varies",
               runtime == GemmRuntimeDim::M ? "m" : "k", trans_a, trans_b);
  if (m == 0 || n == 0) return;
  if (k == 0) return gemm_bf16(trans_a, trans_b, m, n, k, a, b, nullptr, c);
  if (!onednn_makes_bf16_matmul()) {
    return gemm_bf16_through_f32(trans_a, trans_b, m, n, k, a, b, nullptr, c, WideningScratch::Thread);
  }
  // f32 sums in the calling thread's scratch, rounded here: with a bf16 output, oneDNN 2.6's jit gemm
  // behind a runtime dimension keeps its f32 sums in a buffer that concurrent executions of the one
  // primitive share (measured: wrong sums whenever two threads run it at once).
  GemmKey key{.m = runtime == GemmRuntimeDim::M ? 0 : m, .n = n, .k = runtime == GemmRuntimeDim::K ? 0 : k,
              .trans_a = trans_a, .trans_b = trans_b, .lda = trans_a ? m : k, .ldb = trans_b ? k : n, .ldc = n,
              .bias = false, .f32_out = true, .accumulate = false, .threads = omp_get_max_threads(),
              .runtime = runtime};
  float* sums = thread_scratch<float>(kRuntimeSumsSlot, static_cast<size_t>(m * n));
  run(key, a, b, nullptr, sums, m, k);
  for (int64_t row = 0; row < m; ++row) round_row(sums + row * n, nullptr, c + row * n, n);
}

}  // namespace strata::cpu
