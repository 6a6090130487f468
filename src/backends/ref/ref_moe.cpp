// The mixture-of-experts ops in double (ref_io.h): the router, its loss terms, the permutation and the
// combine, and the sigmoid gate. The grouped GEMM is in ref_grouped_matmul.cpp.
#include <cmath>
#include <vector>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"
#include "ops/moe_dispatch.h"
#include "ops/moe_ops.h"

namespace strata::ref {

namespace {

int32_t* i32(const Tensor& tensor) { return tensor.data<int32_t>(); }

// Softmax or sigmoid scores of one row of logits.
std::vector<double> scores_of(const double* logits, size_t experts, MoeScoring scoring) {
  std::vector<double> scores(logits, logits + experts);
  if (scoring == MoeScoring::Sigmoid) {
    for (double& s : scores) s = 1.0 / (1.0 + std::exp(-s));
    return scores;
  }
  double max = scores[0];
  for (double s : scores) max = std::max(max, s);
  double sum = 0;
  for (double& s : scores) sum += (s = std::exp(s - max));
  for (double& s : scores) s /= sum;
  return scores;
}

double log_sum_exp(const double* logits, size_t experts) {
  double max = logits[0];
  for (size_t e = 0; e < experts; ++e) max = std::max(max, logits[e]);
  double sum = 0;
  for (size_t e = 0; e < experts; ++e) sum += std::exp(logits[e] - max);
  return max + std::log(sum);
}

void route(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const std::vector<double> logits = load(in[0]);
  const auto experts = static_cast<size_t>(in[0].size(-1));
  const MoeRouting routing = moe_routing("moe_route", attrs, in[0].size(-1));
  const auto k = static_cast<size_t>(routing.top_k);
  const size_t tokens = logits.size() / experts;
  std::vector<double> weights(tokens * k);
  int32_t* chosen = i32(out[1]);
  for (size_t t = 0; t < tokens; ++t) {
    const std::vector<double> scores = scores_of(logits.data() + t * experts, experts, routing.scoring);
    choose_top_k(scores.data(), static_cast<int64_t>(experts), routing.top_k, chosen + t * k);
    double sum = 0;
    for (size_t j = 0; j < k; ++j) sum += (weights[t * k + j] = scores[static_cast<size_t>(chosen[t * k + j])]);
    if (routing.norm_topk_prob) {
      for (size_t j = 0; j < k; ++j) weights[t * k + j] /= sum;
    }
  }
  store(out[0], weights);
  std::vector<int64_t> routed(experts);
  const auto token_count = static_cast<int64_t>(tokens), expert_count = static_cast<int64_t>(experts);
  plan_dispatch(chosen, token_count * routing.top_k, expert_count, routing.capacity(token_count, expert_count),
                i32(out[2]), i32(out[3]), routed.data());
  store(out[4], std::vector<double>(routed.begin(), routed.end()));
  const int32_t* kept = i32(out[3]);
  store(out[5], std::vector<double>(kept, kept + experts));
}

void route_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const std::vector<double> dweights = load(in[0]);
  const std::vector<double> logits = load(in[1]);
  const auto experts = static_cast<size_t>(in[1].size(-1));
  const MoeRouting routing = moe_routing("moe_route_backward", attrs, in[1].size(-1));
  const auto k = static_cast<size_t>(routing.top_k);
  const std::vector<int64_t> chosen = load_indices(in[2]);
  check_indices("moe_route_backward", "experts", in[2], chosen, in[1].size(-1));
  std::vector<double> dlogits(logits.size());
  for (size_t t = 0; t < logits.size() / experts; ++t) {
    const std::vector<double> s = scores_of(logits.data() + t * experts, experts, routing.scoring);
    double sum = 0, weighted = 0;
    for (size_t j = 0; j < k; ++j) {
      const double score = s[static_cast<size_t>(chosen[t * k + j])];
      sum += score;
      weighted += dweights[t * k + j] * score;
    }
    std::vector<double> ds(experts, 0.0);
    for (size_t j = 0; j < k; ++j) {
      const double dw = dweights[t * k + j];
      ds[static_cast<size_t>(chosen[t * k + j])] += routing.norm_topk_prob ? dw / sum - weighted / (sum * sum) : dw;
    }
    double dot = 0;
    for (size_t e = 0; e < experts; ++e) dot += s[e] * ds[e];
    for (size_t e = 0; e < experts; ++e) {
      dlogits[t * experts + e] =
          routing.scoring == MoeScoring::Softmax ? s[e] * (ds[e] - dot) : ds[e] * s[e] * (1.0 - s[e]);
    }
  }
  store(out[0], dlogits);
}

void router_loss_terms(const Tensors& in, const Tensors& out, const Attrs&) {
  const std::vector<double> logits = load(in[0]);
  const auto experts = static_cast<size_t>(in[0].size(-1));
  std::vector<double> prob_sum(experts, 0.0);
  double z_sum = 0;
  for (size_t t = 0; t < logits.size() / experts; ++t) {
    const std::vector<double> p = scores_of(logits.data() + t * experts, experts, MoeScoring::Softmax);
    for (size_t e = 0; e < experts; ++e) prob_sum[e] += p[e];
    const double lse = log_sum_exp(logits.data() + t * experts, experts);
    z_sum += lse * lse;
  }
  store(out[0], prob_sum);
  store(out[1], {z_sum});
}

void router_loss_terms_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const std::vector<double> dprob_sum = load(in[0]);
  const double dz_sum = load(in[1])[0];
  const std::vector<double> logits = load(in[2]);
  const size_t experts = dprob_sum.size();
  std::vector<double> dlogits(logits.size());
  for (size_t t = 0; t < logits.size() / experts; ++t) {
    const std::vector<double> p = scores_of(logits.data() + t * experts, experts, MoeScoring::Softmax);
    const double lse = log_sum_exp(logits.data() + t * experts, experts);
    double dot = 0;
    for (size_t e = 0; e < experts; ++e) dot += p[e] * dprob_sum[e];
    for (size_t e = 0; e < experts; ++e) {
      dlogits[t * experts + e] = p[e] * (dprob_sum[e] - dot) + 2.0 * dz_sum * lse * p[e];
    }
  }
  store(out[0], dlogits);
}

void aux_loss(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const std::vector<double> prob_sum = load(in[0]);
  const double z_sum = load(in[1])[0];
  const std::vector<double> routed = load(in[2]);
  const auto tokens = static_cast<double>(attrs.get_int("tokens"));
  double balance = 0;
  for (size_t e = 0; e < prob_sum.size(); ++e) balance += routed[e] * prob_sum[e];
  balance *= static_cast<double>(prob_sum.size()) / (tokens * tokens);
  const double z = z_sum / tokens;
  store(out[0], {attrs.get_float("aux_coef") * balance + attrs.get_float("z_coef") * z});
  store(out[1], {balance});
  store(out[2], {z});
}

void aux_loss_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const double dloss = load(in[0])[0];
  const std::vector<double> routed = load(in[1]);
  const auto tokens = static_cast<double>(attrs.get_int("tokens"));
  const double per_count = dloss * attrs.get_float("aux_coef") * static_cast<double>(routed.size()) / (tokens * tokens);
  std::vector<double> dprob_sum(routed.size());
  for (size_t e = 0; e < routed.size(); ++e) dprob_sum[e] = per_count * routed[e];
  store(out[0], dprob_sum);
  store(out[1], {dloss * attrs.get_float("z_coef") / tokens});
}

// Rows of the permuted buffer, checked: each in [-1, buffer_rows).
std::vector<int64_t> load_rows(const std::string& op, const Tensor& rows, int64_t buffer_rows) {
  std::vector<int64_t> values = load_indices(rows);
  for (size_t a = 0; a < values.size(); ++a) {
    if (values[a] < -1 || values[a] >= buffer_rows) {
      fail("op '{}': input 'rows' holds {} at assignment {}, outside [-1, {})", op, values[a], a, buffer_rows);
    }
  }
  return values;
}

void permute(const Tensors& in, const Tensors& out, const Attrs&) {
  const std::vector<double> x = load(in[0]);
  const auto channels = static_cast<size_t>(in[0].size(-1));
  const std::vector<int64_t> rows = load_rows("moe_permute", in[1], out[0].size(0));
  const size_t k = static_cast<size_t>(in[1].size(-1));
  std::vector<double> xs(static_cast<size_t>(out[0].numel()), 0.0);
  for (size_t a = 0; a < rows.size(); ++a) {
    if (rows[a] < 0) continue;
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(a / k * channels), channels,
                xs.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(rows[a]) * channels));
  }
  store(out[0], xs);
}

// y[t] = the sum over token t's kept assignments of weight * ys[row] (unit weights when `weights` is empty).
std::vector<double> combine_rows(const std::vector<double>& ys, const std::vector<double>& weights,
                                 const std::vector<int64_t>& rows, size_t k, size_t channels) {
  std::vector<double> y(rows.size() / k * channels, 0.0);
  for (size_t a = 0; a < rows.size(); ++a) {
    if (rows[a] < 0) continue;
    const double weight = weights.empty() ? 1.0 : weights[a];
    const size_t row = static_cast<size_t>(rows[a]) * channels, token = a / k * channels;
    for (size_t c = 0; c < channels; ++c) y[token + c] += weight * ys[row + c];
  }
  return y;
}

void permute_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const std::vector<int64_t> rows = load_rows("moe_permute_backward", in[1], in[0].size(0));
  store(out[0], combine_rows(load(in[0]), {}, rows, static_cast<size_t>(in[1].size(-1)),
                             static_cast<size_t>(in[0].size(1))));
}

void combine(const Tensors& in, const Tensors& out, const Attrs&) {
  const std::vector<int64_t> rows = load_rows("moe_combine", in[2], in[0].size(0));
  store(out[0], combine_rows(load(in[0]), load(in[1]), rows, static_cast<size_t>(in[2].size(-1)),
                             static_cast<size_t>(in[0].size(1))));
}

void combine_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const std::vector<double> dy = load(in[0]);
  const std::vector<double> ys = load(in[1]);
  const std::vector<double> weights = load(in[2]);
  const std::vector<int64_t> rows = load_rows("moe_combine_backward", in[3], in[1].size(0));
  const auto k = static_cast<size_t>(in[3].size(-1));
  const auto channels = static_cast<size_t>(in[1].size(1));
  std::vector<double> dys(ys.size(), 0.0), dweights(weights.size(), 0.0);
  for (size_t a = 0; a < rows.size(); ++a) {
    if (rows[a] < 0) continue;
    const size_t row = static_cast<size_t>(rows[a]) * channels, token = a / k * channels;
    for (size_t c = 0; c < channels; ++c) {
      dys[row + c] = weights[a] * dy[token + c];
      dweights[a] += dy[token + c] * ys[row + c];
    }
  }
  store(out[0], dys);
  store(out[1], dweights);
}

// sigmoid(gate) rounded to the data's dtype, as PyTorch's sigmoid returns it.
double rounded_sigmoid(DType dtype, double gate) { return round_to(dtype, 1.0 / (1.0 + std::exp(-gate))); }

void sigmoid_gate(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> x = load(in[0]);
  const std::vector<double> gate = load(in[1]);
  const size_t channels = x.size() / std::max<size_t>(gate.size(), 1);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= rounded_sigmoid(in[0].dtype(), gate[i / channels]);
  store(out[0], x);
}

void sigmoid_gate_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> dy = load(in[0]);
  const std::vector<double> x = load(in[1]);
  const std::vector<double> gate = load(in[2]);
  const size_t channels = x.size() / std::max<size_t>(gate.size(), 1);
  std::vector<double> dgate(gate.size(), 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = rounded_sigmoid(in[1].dtype(), gate[i / channels]);
    dgate[i / channels] += dy[i] * x[i] * s * (1.0 - s);
    dy[i] *= s;
  }
  store(out[0], dy);
  store(out[1], dgate);
}

}  // namespace

void register_moe(Backend& backend) {
  add_float_kernels(backend, "moe_route", route);
  add_float_kernels(backend, "moe_route_backward", route_backward);
  add_float_kernels(backend, "moe_router_loss_terms", router_loss_terms);
  add_float_kernels(backend, "moe_router_loss_terms_backward", router_loss_terms_backward);
  add_float_kernels(backend, "moe_aux_loss", aux_loss);
  add_float_kernels(backend, "moe_aux_loss_backward", aux_loss_backward);
  add_float_kernels(backend, "moe_permute", permute);
  add_float_kernels(backend, "moe_permute_backward", permute_backward);
  add_float_kernels(backend, "moe_combine", combine);
  add_float_kernels(backend, "moe_combine_backward", combine_backward);
  add_float_kernels(backend, "sigmoid_gate", sigmoid_gate);
  add_float_kernels(backend, "sigmoid_gate_backward", sigmoid_gate_backward);
}

}  // namespace strata::ref
