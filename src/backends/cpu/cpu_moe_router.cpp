// The router's ops in f32, one token per iteration over fixed chunks of tokens (a token's row of E
// scores is short): moe_route (top-k, then the dispatch plan, serial and linear in the assignments),
// its backward, the loss terms (per-chunk f64 partial sums added in chunk order: deterministic for any
// thread count) and moe_aux_loss over the per-expert sums.
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/parallel.h"
#include "ops/moe_dispatch.h"
#include "ops/moe_ops.h"

namespace strata::cpu {

namespace {

constexpr int64_t kTokenGrain = 256;

// scores[0..E) of one token's logits; returns the softmax's log-sum-exp (0 for sigmoid).
float score_row(const float* logits, int64_t experts, MoeScoring scoring, float* scores) {
  if (scoring == MoeScoring::Sigmoid) {
    for (int64_t e = 0; e < experts; ++e) scores[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    return 0.0f;
  }
  float max = logits[0];
  for (int64_t e = 1; e < experts; ++e) max = std::max(max, logits[e]);
  float sum = 0.0f;
  for (int64_t e = 0; e < experts; ++e) sum += (scores[e] = std::exp(logits[e] - max));
  for (int64_t e = 0; e < experts; ++e) scores[e] /= sum;
  return max + std::log(sum);
}

void route(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const int64_t experts = in[0].size(-1), tokens = in[0].numel() / experts;
  const MoeRouting routing = moe_routing("moe_route", attrs, experts);
  const int64_t k = routing.top_k;
  const float* logits = in[0].data<float>();
  float* weights = out[0].data<float>();
  int32_t* chosen = out[1].data<int32_t>();
  parallel_chunks(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(experts));
    for (int64_t t = begin; t < end; ++t) {
      score_row(logits + t * experts, experts, routing.scoring, scores.data());
      choose_top_k(scores.data(), experts, k, chosen + t * k);
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += (weights[t * k + j] = scores[static_cast<size_t>(chosen[t * k + j])]);
      if (!routing.norm_topk_prob) continue;
      for (int64_t j = 0; j < k; ++j) weights[t * k + j] /= sum;
    }
  });
  std::vector<int64_t> routed(static_cast<size_t>(experts));
  plan_dispatch(chosen, tokens * k, experts, routing.capacity(tokens, experts), out[2].data<int32_t>(),
                out[3].data<int32_t>(), routed.data());
  for (int64_t e = 0; e < experts; ++e) {
    out[4].data<float>()[e] = static_cast<float>(routed[static_cast<size_t>(e)]);
    out[5].data<float>()[e] = static_cast<float>(out[3].data<int32_t>()[e]);
  }
}

void route_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const int64_t experts = in[1].size(-1), tokens = in[1].numel() / experts;
  const MoeRouting routing = moe_routing("moe_route_backward", attrs, experts);
  const int64_t k = routing.top_k;
  const float* dweights = in[0].data<float>();
  const float* logits = in[1].data<float>();
  const int32_t* chosen = in[2].data<int32_t>();
  float* dlogits = out[0].data<float>();
  parallel_chunks(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> s(static_cast<size_t>(experts)), ds(static_cast<size_t>(experts));
    for (int64_t t = begin; t < end; ++t) {
      score_row(logits + t * experts, experts, routing.scoring, s.data());
      float sum = 0.0f, weighted = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const float score = s[static_cast<size_t>(chosen[t * k + j])];
        sum += score;
        weighted += dweights[t * k + j] * score;
      }
      std::fill(ds.begin(), ds.end(), 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        const float dw = dweights[t * k + j];
        STRATA_CHECK(chosen[t * k + j] >= 0 && chosen[t * k + j] < experts,
                     "op 'moe_route_backward': input 'experts' holds {} at token {}, outside [0, {})",
                     chosen[t * k + j], t, experts);
        ds[static_cast<size_t>(chosen[t * k + j])] += routing.norm_topk_prob ? dw / sum - weighted / (sum * sum) : dw;
      }
      float dot = 0.0f;
      for (int64_t e = 0; e < experts; ++e) dot += s[static_cast<size_t>(e)] * ds[static_cast<size_t>(e)];
      for (int64_t e = 0; e < experts; ++e) {
        const float se = s[static_cast<size_t>(e)], dse = ds[static_cast<size_t>(e)];
        dlogits[t * experts + e] = routing.scoring == MoeScoring::Softmax ? se * (dse - dot) : dse * se * (1.0f - se);
      }
    }
  });
}

void router_loss_terms(const Tensors& in, const Tensors& out, const Attrs&) {
  const int64_t experts = in[0].size(-1), tokens = in[0].numel() / experts;
  const float* logits = in[0].data<float>();
  const int64_t chunks = (tokens + kTokenGrain - 1) / kTokenGrain;
  // Per chunk: E probability sums, then the z sum.
  std::vector<double> partial(static_cast<size_t>(chunks * (experts + 1)), 0.0);
  parallel_chunks(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    double* sums = partial.data() + begin / kTokenGrain * (experts + 1);
    std::vector<float> p(static_cast<size_t>(experts));
    for (int64_t t = begin; t < end; ++t) {
      const double lse = score_row(logits + t * experts, experts, MoeScoring::Softmax, p.data());
      for (int64_t e = 0; e < experts; ++e) sums[e] += p[static_cast<size_t>(e)];
      sums[experts] += lse * lse;
    }
  });
  float* prob_sum = out[0].data<float>();
  for (int64_t e = 0; e <= experts; ++e) {
    double total = 0.0;
    for (int64_t c = 0; c < chunks; ++c) total += partial[static_cast<size_t>(c * (experts + 1) + e)];
    (e < experts ? prob_sum[e] : *out[1].data<float>()) = static_cast<float>(total);
  }
}

void router_loss_terms_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  const int64_t experts = in[2].size(-1), tokens = in[2].numel() / experts;
  const float* dprob_sum = in[0].data<float>();
  const float dz_sum = *in[1].data<float>();
  const float* logits = in[2].data<float>();
  float* dlogits = out[0].data<float>();
  parallel_chunks(tokens, kTokenGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> p(static_cast<size_t>(experts));
    for (int64_t t = begin; t < end; ++t) {
      const float lse = score_row(logits + t * experts, experts, MoeScoring::Softmax, p.data());
      float dot = 0.0f;
      for (int64_t e = 0; e < experts; ++e) dot += p[static_cast<size_t>(e)] * dprob_sum[e];
      for (int64_t e = 0; e < experts; ++e) {
        const float pe = p[static_cast<size_t>(e)];
        dlogits[t * experts + e] = pe * (dprob_sum[e] - dot) + 2.0f * dz_sum * lse * pe;
      }
    }
  });
}

void aux_loss(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const int64_t experts = in[0].size(0);
  const auto tokens = static_cast<double>(attrs.get_int("tokens"));
  double balance = 0.0;
  for (int64_t e = 0; e < experts; ++e) {
    balance += static_cast<double>(in[2].data<float>()[e]) * static_cast<double>(in[0].data<float>()[e]);
  }
  balance *= static_cast<double>(experts) / (tokens * tokens);
  const double z = static_cast<double>(*in[1].data<float>()) / tokens;
  *out[0].data<float>() = static_cast<float>(attrs.get_float("aux_coef") * balance + attrs.get_float("z_coef") * z);
  *out[1].data<float>() = static_cast<float>(balance);
  *out[2].data<float>() = static_cast<float>(z);
}

void aux_loss_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const int64_t experts = in[1].size(0);
  const double dloss = *in[0].data<float>();
  const auto tokens = static_cast<double>(attrs.get_int("tokens"));
  const double per_count = dloss * attrs.get_float("aux_coef") * static_cast<double>(experts) / (tokens * tokens);
  for (int64_t e = 0; e < experts; ++e) {
    out[0].data<float>()[e] = static_cast<float>(per_count * static_cast<double>(in[1].data<float>()[e]));
  }
  *out[1].data<float>() = static_cast<float>(dloss * attrs.get_float("z_coef") / tokens);
}

}  // namespace

void register_moe_router(Backend& backend) {
  backend.add_kernel("moe_route", DType::F32, route);
  backend.add_kernel("moe_route_backward", DType::F32, route_backward);
  backend.add_kernel("moe_router_loss_terms", DType::F32, router_loss_terms);
  backend.add_kernel("moe_router_loss_terms_backward", DType::F32, router_loss_terms_backward);
  backend.add_kernel("moe_aux_loss", DType::F32, aux_loss);
  backend.add_kernel("moe_aux_loss_backward", DType::F32, aux_loss_backward);
}

}  // namespace strata::cpu
