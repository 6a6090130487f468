#include "backends/planted_fault.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace strata {

namespace {

constexpr const char* kVariable = "STRATA_TEST_PLANT_FAULT";

bool is_attention(const std::string& op) { return op == "attention" || op == "grouped_attention"; }

// A contiguous copy of `input` in which every row's last element is zero (the loop stopped one short).
Tensor without_last_column(const Tensor& input) {
  Tensor wide = input.to(DType::F64);
  const int64_t columns = wide.size(-1);
  double* values = wide.data<double>();
  for (int64_t i = columns - 1; i < wide.numel(); i += columns) values[i] = 0;
  return wide.to(input.dtype());
}

// q with the 1/sqrt(D) the kernel applies undone, as if it had forgotten it.
Tensor unscaled_queries(const Tensor& q, const Attrs& attrs) {
  const double head_dim = static_cast<double>(q.size(-1) / attrs.get_int("n_head"));
  Tensor wide = q.to(DType::F64);
  double* values = wide.data<double>();
  for (int64_t i = 0; i < wide.numel(); ++i) values[i] *= std::sqrt(head_dim);
  return wide.to(q.dtype());
}

// Where q, k or v lies in its f64 copy [B, T, row_width]: head h's columns start at column + h * head_dim.
struct HeadColumns {
  const double* data;
  int64_t row_width, column;
  const double* row(int64_t b, int64_t t, int64_t seq, int64_t head, int64_t head_dim) const {
    return data + (b * seq + t) * row_width + column + head * head_dim;
  }
};

struct AttentionShape {
  int64_t batch, seq, heads, kv_heads, head_dim;
};

// Query `query` of head `head` in batch entry `b` over keys 0..last: writes its output row and returns the log-sum-exp
// of its scaled scores.
double attend(const AttentionShape& s, const HeadColumns& q, const HeadColumns& k, const HeadColumns& v, int64_t b,
              int64_t head, int64_t query, int64_t last, double* out) {
  const int64_t kv_head = head / (s.heads / s.kv_heads);
  const double* query_row = q.row(b, query, s.seq, head, s.head_dim);
  std::vector<double> scores(static_cast<size_t>(last + 1));
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= last; ++j) {
    const double* key = k.row(b, j, s.seq, kv_head, s.head_dim);
    double dot = 0;
    for (int64_t d = 0; d < s.head_dim; ++d) dot += query_row[d] * key[d];
    scores[j] = dot / std::sqrt(static_cast<double>(s.head_dim));
    max_score = std::max(max_score, scores[j]);
  }
  double total = 0;
  for (const double score : scores) total += std::exp(score - max_score);
  const double lse = max_score + std::log(total);
  for (int64_t j = 0; j <= last; ++j) {
    const double p = std::exp(scores[j] - lse);
    const double* value = v.row(b, j, s.seq, kv_head, s.head_dim);
    for (int64_t d = 0; d < s.head_dim; ++d) out[d] += p * value[d];
  }
  return lse;
}

// Causal attention (`attention`'s packed qkv or `grouped_attention`'s q, k, v) with the mask one position off:
// query i also sees key i + 1; the last query, with no key after it, is as it should be. A plain f64 loop, each output
// rounded once to its dtype: the fused kernels' only offset, the KV cache's `position`, shifts every query (the last
// past the keys) and writes no lse, and a wrapper cannot shift a mask inside the kernel.
void attention_one_past_the_mask(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  const bool packed = inputs.size() == 1;
  const Tensor q = inputs[0].to(DType::F64);
  const Tensor k = packed ? q : inputs[1].to(DType::F64), v = packed ? q : inputs[2].to(DType::F64);
  const int64_t heads = attrs.get_int("n_head"), width = outputs[0].size(2);
  const AttentionShape shape{q.size(0), q.size(1), heads, packed ? heads : attrs.get_int("n_kv_head"), width / heads};
  const HeadColumns q_heads{q.data<double>(), q.size(2), 0};
  const HeadColumns k_heads{k.data<double>(), k.size(2), packed ? width : 0};
  const HeadColumns v_heads{v.data<double>(), v.size(2), packed ? 2 * width : 0};
  Tensor out = Tensor::zeros(outputs[0].shape(), DType::F64), lse = Tensor::zeros(outputs[1].shape(), DType::F64);
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < shape.seq; ++i) {
        double* out_row = out.data<double>() + (b * shape.seq + i) * width + h * shape.head_dim;
        const int64_t last = std::min(i + 1, shape.seq - 1);  // the fault: i, in a causal mask
        lse.data<double>()[(b * heads + h) * shape.seq + i] =
            attend(shape, q_heads, k_heads, v_heads, b, h, i, last, out_row);
      }
    }
  }
  for (auto [target, result] : {std::pair{outputs[0], out}, std::pair{outputs[1], lse}}) {
    target.copy_from(result.to(target.dtype()));  // a handle on the output's own bytes
  }
}

KernelFn planted(const std::string& op, const std::string& kind, KernelFn kernel) {
  if (kind == "eps" || (kind == "scale" && !is_attention(op))) {
    const std::string attr = kind;
    return [kernel, attr](const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
      if (!attrs.has(attr)) fail("{}: the op has no attr '{}' to get wrong", kVariable, attr);
      Attrs wrong = attrs;
      wrong.set(attr, attr == "eps" ? attrs.get_float(attr) * 10 : 1.0);
      kernel(inputs, outputs, wrong);
    };
  }
  if (kind == "scale") {
    return [kernel](const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
      Tensors unscaled = inputs;
      unscaled[0] = unscaled_queries(inputs[0], attrs);
      kernel(unscaled, outputs, attrs);
    };
  }
  if (kind == "offbyone") {
    return [kernel](const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
      Tensors shortened = inputs;
      shortened[0] = without_last_column(inputs[0]);
      kernel(shortened, outputs, attrs);
    };
  }
  if (kind == "mask") {
    if (!is_attention(op)) fail("{}={}:{}: only causal attention has a mask to get wrong", kVariable, op, kind);
    return attention_one_past_the_mask;
  }
  fail("{}={}:{}: unknown kind '{}' (eps, scale, offbyone or mask)", kVariable, op, kind, kind);
}

}  // namespace

void plant_test_fault(Backend& backend) {
  const char* value = std::getenv(kVariable);
  if (value == nullptr || *value == '\0') return;
  const std::string text = value;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) fail("{}='{}': expected <op>:<kind>", kVariable, text);
  const std::string op = text.substr(0, colon), kind = text.substr(colon + 1);
  int planted_kernels = 0;
  for (const auto& [name, dtype] : backend.kernels()) {  // a copy: the loop replaces entries
    if (name != op) continue;
    const bool emulated = backend.is_emulated(name, dtype);
    KernelFn kernel = planted(op, kind, *backend.find(name, dtype));
    backend.remove_kernel(name, dtype);
    if (emulated) {
      backend.add_emulated_kernel(name, dtype, kernel);
    } else {
      backend.add_kernel(name, dtype, kernel);
    }
    ++planted_kernels;
  }
  if (planted_kernels == 0) fail("{}='{}': backend '{}' has no kernel for op '{}'", kVariable, text, backend.name(), op);
}

}  // namespace strata
