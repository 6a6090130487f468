// Fused ops that graph passes (graph/fusion.h) put in place of chains of
// standard ops, so activations are read once: residual add + LayerNorm or
// RMSNorm, their backwards with the residual-gradient add, and element-wise
// programs.
#include "ops/fused_program.h"
#include "ops/schema_checks.h"
#include "ops/standard_ops.h"

namespace strata {

namespace {

using namespace schema_checks;

// `narrow` may be `wide`'s dtype or a smaller floating one, which widens exactly
// (bf16 or f16 into f32, anything into f64): a cast the fused op absorbs.
bool widens_exactly(DType narrow, DType wide) {
  return narrow == wide || (is_floating(narrow) && dtype_size(narrow) < dtype_size(wide));
}

// add_rms_norm's y dtype: attr y_dtype (the narrowing cast that read y,
// absorbed by the fusion pass), else x's.
DType y_dtype_of(const std::string& op, const TensorMeta& x, const Attrs& attrs) {
  if (!attrs.has("y_dtype")) return x.dtype;
  const DType y = parse_dtype(attrs.get_string("y_dtype"));
  if (!is_floating(y) || dtype_size(y) > dtype_size(x.dtype)) {
    fail("op '{}': attr y_dtype must be x's dtype ({}) or a narrower floating one, got {}", op,
         dtype_name(x.dtype), dtype_name(y));
  }
  return y;
}

void add_add_layernorm(OpRegistry& registry) {
  registry.add({
      .name = "add_layernorm",
      .summary = "sum = x + r rounded to x's dtype (r is x's dtype or a narrower floating one, widened exactly; "
                 "r's shape is a suffix of x's, repeated over the leading dims); then y, mean, rstd = "
                 "layernorm(sum, gamma, beta) exactly as op layernorm computes them from the stored sum",
      .inputs = {"x", "r", "gamma", "beta"},
      .outputs = {"sum", "y", "mean", "rstd"},
      .attrs = {"eps"},
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            const std::string op = "add_layernorm";
            const TensorMeta& x = in[0];
            expect(is_floating(x.dtype) && !x.shape.empty(), op, "x", "be floating with at least 1 dim", x);
            expect(widens_exactly(in[1].dtype, x.dtype), op, "r", "have x's dtype or a narrower floating one", in[1]);
            expect(!in[1].shape.empty() && is_suffix(in[1].shape, x.shape), op, "r",
                   "have a suffix of x's shape " + shape_str(x.shape), in[1]);
            Shape channels{x.shape.back()};
            for (size_t i : {size_t{2}, size_t{3}}) {
              expect(in[i].shape == channels && in[i].dtype == x.dtype, op, i == 2 ? "gamma" : "beta",
                     "be " + std::string(dtype_name(x.dtype)) + " " + shape_str(channels), in[i]);
            }
            TensorMeta stats{drop_last(x.shape), stats_dtype(x.dtype)};
            return {x, x, stats, stats};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 9.0 * count(in[0]); },
      .may_reuse = {{0, 0}},
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

void add_layernorm_backward_add(OpRegistry& registry) {
  registry.add({
      .name = "layernorm_backward_add",
      .summary = "dx = dres + the dx of op layernorm_backward(dy, x, gamma, mean, rstd), rounded once; dgamma and "
                 "dbeta as layernorm_backward. dy may be narrower than x (widened exactly); dres is x's "
                 "shape and dtype",
      .inputs = {"dy", "x", "gamma", "mean", "rstd", "dres"},
      .outputs = {"dx", "dgamma", "dbeta"},
      .dtype_input = 1,
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            const std::string op = "layernorm_backward_add";
            const TensorMeta& x = in[1];
            expect(is_floating(x.dtype) && !x.shape.empty(), op, "x", "be floating with at least 1 dim", x);
            expect(in[0].shape == x.shape && widens_exactly(in[0].dtype, x.dtype), op, "dy",
                   "have x's shape and x's dtype or a narrower floating one", in[0]);
            expect(in[2].shape == Shape{x.shape.back()} && in[2].dtype == x.dtype, op, "gamma",
                   "be x's dtype, shape [" + std::to_string(x.shape.back()) + "]", in[2]);
            TensorMeta stats{drop_last(x.shape), stats_dtype(x.dtype)};
            expect(in[3] == stats, op, "mean", "be " + std::string(dtype_name(stats.dtype)) + " " + shape_str(stats.shape),
                   in[3]);
            expect(in[4] == stats, op, "rstd", "be " + std::string(dtype_name(stats.dtype)) + " " + shape_str(stats.shape),
                   in[4]);
            expect(in[5] == x, op, "dres", "have x's shape and dtype", in[5]);
            return {x, in[2], in[2]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 15.0 * count(in[1]); },
      .may_reuse = {{0, 5}},
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

void add_add_rms_norm(OpRegistry& registry) {
  registry.add({
      .name = "add_rms_norm",
      .summary = "sum = x + r rounded to x's dtype (r is x's dtype or a narrower floating one, widened exactly; "
                 "r's shape is a suffix of x's, repeated over the leading dims); then y = rms_norm(sum, weight) "
                 "exactly as op rms_norm computes it from the stored sum; with attr y_dtype (optional, x's dtype or "
                 "a narrower floating one), y rounded to x's dtype is rounded again to it, as a following cast would",
      .inputs = {"x", "r", "weight"},
      .outputs = {"sum", "y"},
      .attrs = {"eps"},
      .infer =
          [](const Metas& in, const Attrs& attrs) -> Metas {
            const std::string op = "add_rms_norm";
            const TensorMeta& x = in[0];
            expect(is_floating(x.dtype) && !x.shape.empty(), op, "x", "be floating with at least 1 dim", x);
            expect(widens_exactly(in[1].dtype, x.dtype), op, "r", "have x's dtype or a narrower floating one", in[1]);
            expect(!in[1].shape.empty() && is_suffix(in[1].shape, x.shape), op, "r",
                   "have a suffix of x's shape " + shape_str(x.shape), in[1]);
            expect(in[2].shape == Shape{x.shape.back()} && in[2].dtype == x.dtype, op, "weight",
                   "be x's dtype, shape [" + std::to_string(x.shape.back()) + "]", in[2]);
            return {x, {x.shape, y_dtype_of(op, x, attrs)}};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 5.0 * count(in[0]); },
      .may_reuse = {{0, 0}},
      .precision = PrecisionRole::F32Default,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

void add_rms_norm_backward_add(OpRegistry& registry) {
  registry.add({
      .name = "rms_norm_backward_add",
      .summary = "dx = dres + the dx of op rms_norm_backward(dy, x, weight), rounded once; dweight as "
                 "rms_norm_backward. dy may be narrower than x (widened exactly); dres is x's shape and dtype",
      .inputs = {"dy", "x", "weight", "dres"},
      .outputs = {"dx", "dweight"},
      .attrs = {"eps"},
      .dtype_input = 1,
      .infer =
          [](const Metas& in, const Attrs&) -> Metas {
            const std::string op = "rms_norm_backward_add";
            const TensorMeta& x = in[1];
            expect(is_floating(x.dtype) && !x.shape.empty(), op, "x", "be floating with at least 1 dim", x);
            expect(in[0].shape == x.shape && widens_exactly(in[0].dtype, x.dtype), op, "dy",
                   "have x's shape and x's dtype or a narrower floating one", in[0]);
            expect(in[2].shape == Shape{x.shape.back()} && in[2].dtype == x.dtype, op, "weight",
                   "be x's dtype, shape [" + std::to_string(x.shape.back()) + "]", in[2]);
            expect(in[3] == x, op, "dres", "have x's shape and dtype", in[3]);
            return {x, in[2]};
          },
      .flops = [](const Metas& in, const Metas&, const Attrs&) { return 11.0 * count(in[1]); },
      .may_reuse = {{0, 3}},
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

// Every register's metadata, validating each instruction with its standard
// op's own checks.
Metas simulate(const FusedProgram& program, const Metas& in) {
  Metas registers = in;
  for (const FusedInstruction& instruction : program.code) {
    Metas operands;
    for (int operand : instruction.operands()) operands.push_back(registers[static_cast<size_t>(operand)]);
    registers.push_back(OpRegistry::global().infer(instruction.op_name(), operands, instruction.op_attrs()).at(0));
  }
  return registers;
}

// Output metadata of a fused program, checking what the kernels rely on too:
// every instruction produces the output's shape, and inputs are suffixes of
// it (broadcast).
Metas infer_fused(const std::string& op, const Metas& in, const Attrs& attrs) {
  FusedProgram program = FusedProgram::parse(attrs.get_string("program"), static_cast<int>(in.size()));
  if (static_cast<int>(program.code.size()) > kMaxFusedInstructions) {
    fail("op '{}': {} instructions, at most {}", op, program.code.size(), kMaxFusedInstructions);
  }
  Metas registers = simulate(program, in);
  const TensorMeta& out = registers.back();
  for (size_t r = in.size(); r < registers.size(); ++r) {
    if (registers[r].shape != out.shape) {
      fail("op '{}': instruction {} makes {}, not the output's shape {}", op, r - in.size(),
           shape_str(registers[r].shape), shape_str(out.shape));
    }
  }
  for (size_t i = 0; i < in.size(); ++i) {
    expect(is_suffix(in[i].shape, out.shape), op, fmt::format("x{}", i),
           "have a suffix of the output's shape " + shape_str(out.shape), in[i]);
  }
  return {out};
}

void add_fused_elementwise(OpRegistry& registry, int num_inputs) {
  std::string name = fused_elementwise_op(num_inputs);
  std::vector<std::string> inputs;
  std::vector<std::pair<size_t, size_t>> reuse;
  for (int i = 0; i < num_inputs; ++i) {
    inputs.push_back(fmt::format("x{}", i));
    reuse.emplace_back(0, static_cast<size_t>(i));  // the planner pairs equal sizes only
  }
  registry.add({
      .name = name,
      .summary = fmt::format("out = the last register of the element-wise program in attr `program` (see "
                             "ops/fused_program.h) over inputs x0..x{}: each instruction is the standard op of its "
                             "name, its result rounded to that op's output dtype",
                             num_inputs - 1),
      .inputs = inputs,
      .outputs = {"out"},
      .attrs = {"program"},
      .infer = [name](const Metas& in, const Attrs& attrs) { return infer_fused(name, in, attrs); },
      .flops =
          [](const Metas& in, const Metas&, const Attrs& attrs) {
            FusedProgram program = FusedProgram::parse(attrs.get_string("program"), static_cast<int>(in.size()));
            Metas registers = simulate(program, in);
            double flops = 0;
            for (const FusedInstruction& instruction : program.code) {
              Metas operands;
              for (int operand : instruction.operands()) operands.push_back(registers[static_cast<size_t>(operand)]);
              flops += OpRegistry::global().cost(instruction.op_name(), operands, instruction.op_attrs()).flops;
            }
            return flops;
          },
      .may_reuse = reuse,
      .differentiable = Differentiable::No,
      .placement = PlacementRule::None,
  });
}

}  // namespace

void add_fused_ops(OpRegistry& registry) {
  add_add_layernorm(registry);
  add_layernorm_backward_add(registry);
  add_add_rms_norm(registry);
  add_rms_norm_backward_add(registry);
  for (int n = 1; n <= kMaxFusedInputs; ++n) add_fused_elementwise(registry, n);
}

}  // namespace strata
