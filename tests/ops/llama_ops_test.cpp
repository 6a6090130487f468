// The LLaMA ops on ref against HuggingFace transformers' LlamaForCausalLM
// formulas written out here: LlamaRMSNorm, the rotary embedding
// (LlamaRotaryEmbedding's frequencies with default, "linear" and "llama3"
// scaling, apply_rotary_pos_emb's rotate-half) and the MLP's silu(gate) * up,
// each with the roundings PyTorch makes in the activations' dtype; then the
// inputs and attributes each op refuses.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <numbers>

#include "op_test_util.h"
#include "ops/rope_frequencies.h"

namespace strata::testing {
namespace {

// `value` as PyTorch stores it in `dtype`: bf16 and f16 arithmetic is done in
// f32 and rounded from there.
double stored(DType dtype, double value) {
  switch (dtype) {
    case DType::F32: return static_cast<float>(value);
    case DType::BF16: return bf16_to_float(float_to_bf16(static_cast<float>(value)));
    case DType::F16: return fp16_to_float(float_to_fp16(static_cast<float>(value)));
    default: return value;
  }
}

const DType kFloatTypes[] = {DType::F64, DType::F32, DType::BF16, DType::F16};

// Relative spacing of the type's values (f64: room for a different order of summation).
double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::F32: return std::ldexp(1.0, -23);
    case DType::BF16: return std::ldexp(1.0, -7);
    case DType::F16: return std::ldexp(1.0, -10);
    default: return 1e-12;
  }
}

// ---- rms_norm -------------------------------------------------------------------

// HF: h = x.float(); h = h * rsqrt(mean(h^2) + eps); return weight * h.to(x.dtype).
std::vector<double> hf_rms_norm(const Tensor& x, const Tensor& weight, double eps, bool round_h) {
  std::vector<double> xs = values_of(x), w = values_of(weight), y(xs.size());
  const size_t width = w.size();
  for (size_t row = 0; row < xs.size() / width; ++row) {
    double squares = 0.0;
    for (size_t c = 0; c < width; ++c) squares += xs[row * width + c] * xs[row * width + c];
    double rstd = 1.0 / std::sqrt(squares / static_cast<double>(width) + eps);
    for (size_t c = 0; c < width; ++c) {
      double h = xs[row * width + c] * rstd;
      y[row * width + c] = stored(x.dtype(), w[c] * (round_h ? stored(x.dtype(), h) : h));
    }
  }
  return y;
}

TEST(LlamaOps, RmsNormRoundsTheNormalisedValueBeforeTheWeight) {
  const Attrs attrs{{"eps", 1e-5}};
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = random_tensor({2, 3, 37}, 1, 2.0, dtype), weight = random_tensor({37}, 2, 1.0, dtype);
    Tensor y = run_ref("rms_norm", {x, weight}, attrs)[0];
    EXPECT_EQ(y.dtype(), dtype);
    expect_all_near(y, hf_rms_norm(x, weight, 1e-5, /*round_h=*/true), 0, 0, "rms_norm");
    if (dtype == DType::BF16) {  // the case tells the two orders of rounding apart
      EXPECT_NE(hf_rms_norm(x, weight, 1e-5, true), hf_rms_norm(x, weight, 1e-5, false));
    }
  }
}

TEST(LlamaOps, RmsNormBackwardMatchesItsFormula) {
  const double eps = 1e-6;
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = random_tensor({4, 9}, 1, 2.0, dtype), weight = random_tensor({9}, 2, 1.0, dtype);
    Tensor dy = random_tensor({4, 9}, 3, 1.0, dtype);
    std::vector<double> xs = values_of(x), w = values_of(weight), d = values_of(dy);
    std::vector<double> dx(xs.size()), dweight(9, 0.0);
    for (size_t row = 0; row < 4; ++row) {
      const double* xr = xs.data() + row * 9;
      const double* dr = d.data() + row * 9;
      double squares = 0.0, gh = 0.0;
      for (size_t c = 0; c < 9; ++c) squares += xr[c] * xr[c];
      double rstd = 1.0 / std::sqrt(squares / 9 + eps);
      for (size_t c = 0; c < 9; ++c) gh += dr[c] * w[c] * xr[c] * rstd / 9;
      for (size_t c = 0; c < 9; ++c) {
        dx[row * 9 + c] = rstd * (dr[c] * w[c] - xr[c] * rstd * gh);
        dweight[c] += dr[c] * stored(dtype, xr[c] * rstd);  // the rounded h the forward multiplies
      }
    }
    Tensors grads = run_ref("rms_norm_backward", {dy, x, weight}, {{"eps", eps}});
    // Each output is rounded once from double; this formula sums in another order, so a value
    // near a rounding boundary may land one unit in the last place apart.
    expect_all_near(grads[0], dx, 1e-12, unit_roundoff(dtype), "dx");
    expect_all_near(grads[1], dweight, 1e-12, unit_roundoff(dtype), "dweight");
  }
}

// ---- rope -------------------------------------------------------------------------

struct RopeCase {
  std::string scaling;
  double theta, factor = 1, low = 1, high = 4;
  int64_t original = 8192;
};

Attrs rope_attrs(const RopeCase& c, int64_t head_dim, bool inverse) {
  return {{"head_dim", head_dim}, {"theta", c.theta},         {"scaling", c.scaling},
          {"factor", c.factor},   {"low_freq_factor", c.low}, {"high_freq_factor", c.high},
          {"original_max_positions", c.original},             {"inverse", inverse}};
}

// HF's _compute_default_rope_parameters, then _compute_linear_scaling_rope_parameters
// or _compute_llama3_parameters, each PyTorch op on an f32 tensor written as its
// f32 operation: Python scalars meet the tensor as f32, `a / tensor` is
// PyTorch's reciprocal(tensor) * a, base ** t is taken correctly rounded.
std::vector<float> hf_inv_freq(const RopeCase& c, int64_t dim) {
  std::vector<float> inv_freq;
  for (int64_t j = 0; j < dim; j += 2) {
    float exponent = static_cast<float>(j) / static_cast<float>(dim);
    auto power = static_cast<float>(std::pow(static_cast<double>(static_cast<float>(c.theta)), exponent));
    inv_freq.push_back((1.0f / power) * 1.0f);
  }
  const auto factor = static_cast<float>(c.factor);
  for (float& inv : inv_freq) {
    if (c.scaling == "linear") inv /= factor;
    if (c.scaling != "llama3") continue;
    double low_freq_wavelen = static_cast<double>(c.original) / c.low;  // Python floats
    double high_freq_wavelen = static_cast<double>(c.original) / c.high;
    float wavelen = (1.0f / inv) * static_cast<float>(2 * std::numbers::pi);
    float inv_freq_llama = wavelen > static_cast<float>(low_freq_wavelen) ? inv / factor : inv;
    float smooth_factor = ((1.0f / wavelen) * static_cast<float>(c.original) - static_cast<float>(c.low)) /
                          static_cast<float>(c.high - c.low);
    float smoothed = (1.0f - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
    bool medium =
        !(wavelen < static_cast<float>(high_freq_wavelen)) && !(wavelen > static_cast<float>(low_freq_wavelen));
    inv = medium ? smoothed : inv_freq_llama;
  }
  return inv_freq;
}

// apply_rotary_pos_emb: freqs = inv_freq x position (f32), emb = cat(freqs, freqs),
// cos and sin in f32 cast to x's dtype, y = x*cos + rotate_half(x)*sin in x's dtype.
std::vector<double> hf_rope(const Tensor& x, const std::vector<int64_t>& positions, const RopeCase& c, int64_t dim,
                            bool inverse) {
  std::vector<float> inv_freq = hf_inv_freq(c, dim);
  const DType dtype = x.dtype();
  std::vector<double> xs = values_of(x), y(xs.size());
  const int64_t seq = x.size(1), half = dim / 2;
  for (int64_t head = 0; head < x.numel() / dim; ++head) {
    int64_t position = positions[static_cast<size_t>(head / (x.size(2) / dim) % seq)];
    const double* q = xs.data() + head * dim;
    for (int64_t k = 0; k < dim; ++k) {
      double angle = static_cast<float>(position) * inv_freq[static_cast<size_t>(k % half)];
      double cos = stored(dtype, static_cast<float>(std::cos(angle)));
      double sin = stored(dtype, static_cast<float>(std::sin(inverse ? -angle : angle)));
      double rotated = k < half ? -q[k + half] : q[k - half];
      y[static_cast<size_t>(head * dim + k)] = stored(dtype, stored(dtype, q[k] * cos) + stored(dtype, rotated * sin));
    }
  }
  return y;
}

TEST(LlamaOps, RopeMatchesHuggingFaceFormulas) {
  const RopeCase cases[] = {
      {"none", 10000.0},
      {"linear", 10000.0, 4.0},
      // Llama 3.1's scaling on D = 16 with 256 original positions: wavelengths from 6.3 to 19000, every band.
      {"llama3", 10000.0, 8.0, 1.0, 4.0, 256},
  };
  const std::vector<int64_t> positions{0, 1, 7, 300, 4099};  // absolute, as a KV-cache decoder passes them
  Tensor position_tensor = make_indices({5}, positions, DType::I32);
  for (const RopeCase& c : cases) {
    for (DType dtype : kFloatTypes) {
      for (bool inverse : {false, true}) {
        SCOPED_TRACE(c.scaling + " " + std::string(dtype_name(dtype)) + (inverse ? " inverse" : ""));
        Tensor x = random_tensor({2, 5, 3 * 16}, 1, 1.0, dtype);
        Tensor y = run_ref("rope", {x, position_tensor}, rope_attrs(c, 16, inverse))[0];
        EXPECT_EQ(y.dtype(), dtype);
        expect_all_near(y, hf_rope(x, positions, c, 16, inverse), 0, 0, "rope");
      }
    }
  }
}

TEST(LlamaOps, RopeFrequenciesAreHuggingFacesBits) {
  for (const RopeCase& c : {RopeCase{"linear", 5e5, 2.0}, RopeCase{"llama3", 5e5, 8.0, 1.0, 4.0, 8192}}) {
    for (int64_t dim : {64, 80, 128}) {
      std::vector<float> ours = rope_inv_freq(rope_params("rope", rope_attrs(c, dim, false)));
      EXPECT_EQ(ours, hf_inv_freq(c, dim)) << c.scaling << " D " << dim;
    }
  }
  // Llama 3.1's inv_freq (theta 5e5, D 128, factor 8, low 1, high 4, 8192 original
  // positions) as PyTorch 1.13 computes it running HF's _compute_llama3_parameters:
  // j <= 28 unscaled, 29..34 smoothed, from 35 divided by 8.
  std::vector<float> llama31 =
      rope_inv_freq(rope_params("rope", rope_attrs({"llama3", 5e5, 8.0, 1.0, 4.0, 8192}, 128, false)));
  const std::pair<size_t, uint32_t> torch_bits[] = {{0, 0x3f800000}, {1, 0x3f508ac1},  {28, 0x3b527720},
                                                    {29, 0x3b0dfd06}, {31, 0x3a60979e}, {34, 0x393b2dd2},
                                                    {35, 0x38c86886}, {63, 0x34a4c2ff}};
  for (const auto& [j, bits] : torch_bits) EXPECT_EQ(std::bit_cast<uint32_t>(llama31[j]), bits) << "inv_freq " << j;
}

// ---- swiglu ------------------------------------------------------------------------

TEST(LlamaOps, SwigluMatchesSiluTimesUp) {
  Tensor gate = random_tensor({3, 11}, 1, 4.0), up = random_tensor({3, 11}, 2);
  std::vector<double> g = values_of(gate), u = values_of(up), expected(g.size());
  for (size_t i = 0; i < g.size(); ++i) expected[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];  // F.silu(gate) * up
  expect_all_near(run_ref("swiglu", {gate, up})[0], expected, 0, 1e-15, "swiglu");
}

// ---- reshape -----------------------------------------------------------------------

TEST(LlamaOps, ReshapeKeepsTheElementsInOrder) {
  Tensor x = random_tensor({2, 3, 6}, 1);
  Tensor y = run_ref("reshape", {x}, {{"keep", int64_t{2}}, {"tail", std::vector<int64_t>{2, 3}}})[0];
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2, 3}));
  expect_all_near(y, values_of(x), 0, 0, "reshape");
  expect_error([&] { run_ref("reshape", {x}, {{"keep", int64_t{2}}, {"tail", std::vector<int64_t>{4}}}); },
               {"'reshape'", "[2, 3, 6]", "[2, 3, 4]"});
  expect_error([&] { run_ref("reshape", {x}, {{"keep", int64_t{4}}, {"tail", std::vector<int64_t>{}}}); },
               {"'reshape'", "'keep'"});
}

// ---- refused inputs ----------------------------------------------------------------

TEST(LlamaOps, ErrorsNameTheOpAndTheInput) {
  const Attrs eps{{"eps", 1e-5}};
  expect_error([&] { run_ref("rms_norm", {f64({2, 4}), f64({3})}, eps); }, {"'rms_norm'", "'weight'", "[3]"});
  expect_error([&] { run_ref("rms_norm_backward", {f64({2, 3}), f64({2, 4}), f64({4})}, eps); },
               {"'rms_norm_backward'", "'dy'"});
  expect_error([&] { run_ref("add_rms_norm", {f64({2, 4}), f64({4, 4}), f64({4})}, eps); },
               {"'add_rms_norm'", "'r'"});
  expect_error([&] { run_ref("rms_norm_backward_add", {f64({2, 4}), f64({2, 4}), f64({4}), f64({4})}, eps); },
               {"'rms_norm_backward_add'", "'dres'"});
  expect_error([] { run_ref("swiglu", {f64({2, 4}), f64({2, 5})}); }, {"'swiglu'", "'up'", "[2, 5]"});
  expect_error([] { run_ref("swiglu_backward", {f64({2, 4}), f64({2, 4}), f64({4})}); },
               {"'swiglu_backward'", "'up'"});

  const RopeCase plain{"none", 1e4};
  Tensor positions = make_indices({3}, {0, 1, 2}, DType::I32);
  auto rope = [&](const Tensor& x, const Tensor& at, const Attrs& attrs) { run_ref("rope", {x, at}, attrs); };
  expect_error([&] { rope(f64({1, 3, 12}), positions, rope_attrs(plain, 5, false)); }, {"'rope'", "'head_dim'", "5"});
  expect_error([&] { rope(f64({1, 3, 12}), positions, rope_attrs(plain, 8, false)); },
               {"'rope'", "'x'", "head_dim = 8"});
  Tensor four = make_indices({4}, {0, 1, 2, 3}, DType::I32);
  expect_error([&] { rope(f64({1, 3, 12}), four, rope_attrs(plain, 4, false)); }, {"'rope'", "'positions'", "[3]"});
  expect_error([&] { rope(f64({1, 3, 12}), make_indices({3}, {0, 1, 2}), rope_attrs(plain, 4, false)); },
               {"'rope'", "'positions'", "i32"});
  expect_error([&] { rope(f64({1, 3, 12}), positions, rope_attrs({"yarn", 1e4}, 4, false)); },
               {"'rope'", "'scaling'", "yarn"});
  expect_error([&] { rope(f64({1, 3, 12}), positions, rope_attrs({"llama3", 1e4, 8.0, 4.0, 1.0}, 4, false)); },
               {"'rope'", "'low_freq_factor'"});
  expect_error([&] { rope(f64({1, 3, 12}), positions, rope_attrs({"linear", 1e4, 0.0}, 4, false)); },
               {"'rope'", "'factor'"});
}

}  // namespace
}  // namespace strata::testing
