#pragma once
// Expert parallelism's token exchange as two collective ops over the group attr `group` names (attr
// `ranks` = P of them, each holding E / P consecutive experts): moe_dispatch_exchange sends each row
// of moe_permute's buffer (grouped by expert) to the rank holding its expert, counts first, then the
// rows (all_to_all_v), and groups what arrives by local expert for the grouped GEMM;
// moe_return_exchange sends the experts' outputs back to the rows they came from. Each is the
// other's gradient (the exchange is a permutation). The number of rows a rank receives is known only
// when the counts arrive, so the received buffer has room for the most there can be (P times the
// rows sent: every rank's tokens routed here); the rows past those received are zero, and the
// grouped GEMM computes only the rows its group sizes count.
#include "ops/schema.h"

namespace strata {

void add_expert_exchange_ops(OpRegistry& registry);

// xs [R, C] grouped by expert, group_sizes [E] i32 -> xe [P R, C] grouped by local expert (then by
// source rank, then source order), local_sizes [E / P] i32, received [P, E / P] i32 (rows from each
// rank for each local expert).
void moe_dispatch_exchange_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
// ye [P R, C] in xe's order, group_sizes [E], received [P, E / P] -> ys [R, C] in xs's order.
void moe_return_exchange_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);

}  // namespace strata
