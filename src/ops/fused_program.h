#pragma once
// The program a `fused_elementwise<n>` node carries in its `program`
// attribute: a straight-line sequence of element-wise instructions over
// registers. Registers 0..n-1 hold the node's n inputs, instruction k writes
// register n + k, and the last register is the output. Each instruction is a
// standard op (add, scale, gelu, gelu_backward, cast) with that op's
// semantics, and its result is rounded to its dtype exactly as the unfused op
// would store it: fusing changes where values live, not what they are.
//
// Text form, one instruction per `;`: "cast %0 f32; add %1 %3; gelu %4",
// "scale %2 0.125". Operands are registers, then the op's constant.
#include <optional>
#include <string>
#include <vector>

#include "ops/attrs.h"
#include "core/dtype.h"

namespace strata {

enum class FusedOpcode { Add, Scale, Gelu, GeluBackward, Cast };

struct FusedInstruction {
  FusedOpcode opcode = FusedOpcode::Add;
  int a = 0;                  // first register operand
  int b = -1;                 // second register operand (add, gelu_backward)
  double factor = 1.0;        // scale's factor
  DType dtype = DType::F32;   // cast's target

  std::string op_name() const;  // the standard op it stands for
  Attrs op_attrs() const;       // that op's attributes
  std::vector<int> operands() const;

  // The instruction computing standard op `op` with `attrs` on registers
  // `operands`; nullopt when `op` is not one a fused program can run.
  static std::optional<FusedInstruction> of(const std::string& op, const Attrs& attrs,
                                            const std::vector<int>& operands);
};

// Whether a fused element-wise program can run standard op `op`.
bool runs_in_fused_program(const std::string& op);

struct FusedProgram {
  int num_inputs = 0;
  std::vector<FusedInstruction> code;

  // Throws an Error naming the instruction at fault.
  static FusedProgram parse(const std::string& text, int num_inputs);
  std::string str() const;  // parse(str()) gives the same program; factors round-trip exactly

  int num_registers() const { return num_inputs + static_cast<int>(code.size()); }
  // Each register's dtype given the inputs' (the unfused ops' output dtypes).
  std::vector<DType> register_dtypes(const std::vector<DType>& inputs) const;
};

constexpr int kMaxFusedInputs = 4;
constexpr int kMaxFusedInstructions = 12;

// "fused_elementwise1" .. "fused_elementwise4": one op per input count,
// since an op's inputs are fixed by its schema.
std::string fused_elementwise_op(int num_inputs);
bool is_fused_elementwise_op(const std::string& op);

}  // namespace strata
