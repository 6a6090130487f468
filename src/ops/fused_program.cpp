#include "ops/fused_program.h"

#include <fmt/format.h>

#include <sstream>

#include "core/error.h"

namespace strata {

namespace {

struct OpcodeInfo {
  FusedOpcode opcode;
  const char* name;
  int registers;  // register operands
};

constexpr OpcodeInfo kOpcodes[] = {
    {FusedOpcode::Add, "add", 2},
    {FusedOpcode::Scale, "scale", 1},
    {FusedOpcode::Gelu, "gelu", 1},
    {FusedOpcode::GeluBackward, "gelu_backward", 2},
    {FusedOpcode::Cast, "cast", 1},
};

const OpcodeInfo* info_of(const std::string& op) {
  for (const OpcodeInfo& entry : kOpcodes) {
    if (op == entry.name) return &entry;
  }
  return nullptr;
}

const OpcodeInfo& info(FusedOpcode opcode) {
  for (const OpcodeInfo& entry : kOpcodes) {
    if (entry.opcode == opcode) return entry;
  }
  STRATA_CHECK(false, "unknown fused opcode {}", static_cast<int>(opcode));
  return kOpcodes[0];
}

int parse_register(const std::string& token, int defined, const std::string& instruction) {
  int index = -1;
  if (token.size() > 1 && token[0] == '%') {
    try {
      size_t used = 0;
      index = std::stoi(token.substr(1), &used);
      if (used != token.size() - 1) index = -1;
    } catch (const std::exception&) {
      index = -1;
    }
  }
  if (index < 0 || index >= defined) {
    fail("fused program: instruction '{}' reads '{}', not one of the {} registers defined before it", instruction,
         token, defined);
  }
  return index;
}

}  // namespace

std::string FusedInstruction::op_name() const { return info(opcode).name; }

Attrs FusedInstruction::op_attrs() const {
  if (opcode == FusedOpcode::Scale) return {{"factor", factor}};
  if (opcode == FusedOpcode::Cast) return {{"dtype", std::string(dtype_name(dtype))}};
  return {};
}

std::vector<int> FusedInstruction::operands() const {
  if (info(opcode).registers == 2) return {a, b};
  return {a};
}

std::optional<FusedInstruction> FusedInstruction::of(const std::string& op, const Attrs& attrs,
                                                     const std::vector<int>& operands) {
  const OpcodeInfo* found = info_of(op);
  if (found == nullptr) return std::nullopt;
  STRATA_CHECK(static_cast<int>(operands.size()) == found->registers, "fused {} given {} operands", op,
               operands.size());
  FusedInstruction instruction;
  instruction.opcode = found->opcode;
  instruction.a = operands[0];
  if (found->registers == 2) instruction.b = operands[1];
  if (found->opcode == FusedOpcode::Scale) instruction.factor = attrs.get_float("factor");
  if (found->opcode == FusedOpcode::Cast) instruction.dtype = parse_dtype(attrs.get_string("dtype"));
  return instruction;
}

bool runs_in_fused_program(const std::string& op) { return info_of(op) != nullptr; }

FusedProgram FusedProgram::parse(const std::string& text, int num_inputs) {
  FusedProgram program;
  program.num_inputs = num_inputs;
  std::stringstream instructions(text);
  std::string instruction;
  while (std::getline(instructions, instruction, ';')) {
    std::istringstream words(instruction);
    std::vector<std::string> tokens;
    for (std::string word; words >> word;) tokens.push_back(word);
    if (tokens.empty()) fail("fused program '{}': empty instruction", text);
    const OpcodeInfo* found = info_of(tokens[0]);
    if (found == nullptr) fail("fused program: unknown instruction '{}' in '{}'", tokens[0], text);
    bool has_constant = found->opcode == FusedOpcode::Scale || found->opcode == FusedOpcode::Cast;
    size_t expected = 1 + static_cast<size_t>(found->registers) + (has_constant ? 1 : 0);
    if (tokens.size() != expected) {
      fail("fused program: instruction '{}' needs {} operands, got {}", instruction, expected - 1, tokens.size() - 1);
    }
    FusedInstruction decoded;
    decoded.opcode = found->opcode;
    int defined = program.num_registers();
    decoded.a = parse_register(tokens[1], defined, instruction);
    if (found->registers == 2) decoded.b = parse_register(tokens[2], defined, instruction);
    if (found->opcode == FusedOpcode::Scale) {
      try {
        size_t used = 0;
        decoded.factor = std::stod(tokens[2], &used);
        if (used != tokens[2].size()) throw std::invalid_argument("trailing characters");
      } catch (const std::exception&) {
        fail("fused program: scale factor '{}' in '{}' is not a number", tokens[2], instruction);
      }
    }
    if (found->opcode == FusedOpcode::Cast) decoded.dtype = parse_dtype(tokens[2]);
    program.code.push_back(decoded);
  }
  if (program.code.empty()) fail("fused program '{}' has no instructions", text);
  return program;
}

std::string FusedProgram::str() const {
  std::string text;
  for (const FusedInstruction& instruction : code) {
    if (!text.empty()) text += "; ";
    text += instruction.op_name();
    for (int operand : instruction.operands()) text += fmt::format(" %{}", operand);
    if (instruction.opcode == FusedOpcode::Scale) text += fmt::format(" {}", instruction.factor);  // shortest exact
    if (instruction.opcode == FusedOpcode::Cast) text += fmt::format(" {}", dtype_name(instruction.dtype));
  }
  return text;
}

std::vector<DType> FusedProgram::register_dtypes(const std::vector<DType>& inputs) const {
  STRATA_CHECK(static_cast<int>(inputs.size()) == num_inputs, "{} input dtypes for {} inputs", inputs.size(),
               num_inputs);
  std::vector<DType> dtypes = inputs;
  for (const FusedInstruction& instruction : code) {
    DType first = dtypes[static_cast<size_t>(instruction.a)];
    dtypes.push_back(instruction.opcode == FusedOpcode::Cast ? instruction.dtype : first);
  }
  return dtypes;
}

std::string fused_elementwise_op(int num_inputs) {
  STRATA_CHECK(num_inputs >= 1 && num_inputs <= kMaxFusedInputs, "fused_elementwise with {} inputs", num_inputs);
  return "fused_elementwise" + std::to_string(num_inputs);
}

bool is_fused_elementwise_op(const std::string& op) {
  for (int n = 1; n <= kMaxFusedInputs; ++n) {
    if (op == fused_elementwise_op(n)) return true;
  }
  return false;
}

}  // namespace strata
