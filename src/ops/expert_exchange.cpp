#include "ops/expert_exchange.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/collective_group.h"
#include "ops/schema_checks.h"

namespace strata {

namespace {

using namespace schema_checks;

// The ranks P of attr `ranks`, checked to divide the E experts.
int64_t exchange_ranks(const std::string& op, const Attrs& attrs, int64_t experts) {
  if (attrs.get_string("group").empty()) fail("op '{}': attr 'group' must name a group", op);
  const int64_t ranks = attrs.get_int("ranks");
  if (ranks < 1 || experts % ranks != 0) {
    fail("op '{}': attr 'ranks' ({}) must divide the {} experts (each rank holds as many)", op, ranks, experts);
  }
  return ranks;
}

void expect_rows(const std::string& op, const std::string& input, const TensorMeta& meta) {
  expect(is_floating(meta.dtype) && meta.shape.size() == 2, op, input, "be floating [rows, channels]", meta);
}

void expect_group_sizes(const std::string& op, const TensorMeta& meta) {
  expect(meta.dtype == DType::I32 && meta.shape.size() == 1 && meta.shape[0] > 0, op, "group_sizes",
         "be i32 [num_experts]", meta);
}

Metas dispatch_infer(const Metas& in, const Attrs& attrs) {
  const std::string op = "moe_dispatch_exchange";
  expect_rows(op, "xs", in[0]);
  expect_group_sizes(op, in[1]);
  const int64_t experts = in[1].shape[0], ranks = exchange_ranks(op, attrs, experts);
  return {{{ranks * in[0].shape[0], in[0].shape[1]}, in[0].dtype},
          {{experts / ranks}, DType::I32},
          {{ranks, experts / ranks}, DType::I32}};
}

Metas return_infer(const Metas& in, const Attrs& attrs) {
  const std::string op = "moe_return_exchange";
  expect_rows(op, "ye", in[0]);
  expect_group_sizes(op, in[1]);
  const int64_t experts = in[1].shape[0], ranks = exchange_ranks(op, attrs, experts);
  expect(in[0].shape[0] % ranks == 0, op, "ye", "have a multiple of attr 'ranks' rows", in[0]);
  expect(in[2].dtype == DType::I32 && in[2].shape == Shape{ranks, experts / ranks}, op, "received",
         "be i32 " + shape_str({ranks, experts / ranks}), in[2]);
  return {{{in[0].shape[0] / ranks, in[0].shape[1]}, in[0].dtype}};
}

// Each exchange moves R rows (the dispatch's xs, the return's ys), (P - 1) / P of them off the rank
// when the experts are evenly loaded.
CommCalls exchanged_rows(const Metas& in, const Metas& out, const Attrs&) {
  return {{CommPattern::AllToAll, static_cast<double>(std::min(in[0].nbytes(), out[0].nbytes()))}};
}

// The rows of one exchange, by (rank, local expert): counts[r * L + e].
struct ExchangeCounts {
  int64_t ranks = 1, local = 1;  // P, E / P
  std::vector<int64_t> sent, received;

  int64_t sent_to(int64_t rank) const { return sum(sent, rank); }
  int64_t received_from(int64_t rank) const { return sum(received, rank); }
  int64_t received_for(int64_t expert) const {  // from every rank, for local expert `expert`
    int64_t total = 0;
    for (int64_t r = 0; r < ranks; ++r) total += received[static_cast<size_t>(r * local + expert)];
    return total;
  }
  int64_t sum(const std::vector<int64_t>& counts, int64_t rank) const {
    int64_t total = 0;
    for (int64_t e = 0; e < local; ++e) total += counts[static_cast<size_t>(rank * local + e)];
    return total;
  }
};

ExchangeCounts sent_counts(const std::string& op, const Tensor& group_sizes, int64_t ranks, int64_t rows) {
  ExchangeCounts counts{.ranks = ranks, .local = group_sizes.numel() / ranks};
  const int32_t* sizes = group_sizes.data<int32_t>();
  int64_t total = 0;
  for (int64_t e = 0; e < group_sizes.numel(); ++e) {
    if (sizes[e] < 0) fail("op '{}': input 'group_sizes' holds {} for expert {}, a negative count", op, sizes[e], e);
    counts.sent.push_back(sizes[e]);
    total += sizes[e];
  }
  if (total > rows) fail("op '{}': input 'group_sizes' sums to {}, more than the {} rows", op, total, rows);
  return counts;
}

std::vector<size_t> row_bytes_by_rank(const ExchangeCounts& counts, bool sent, size_t row_bytes) {
  std::vector<size_t> bytes;
  for (int64_t r = 0; r < counts.ranks; ++r) {
    bytes.push_back(static_cast<size_t>(sent ? counts.sent_to(r) : counts.received_from(r)) * row_bytes);
  }
  return bytes;
}

// Moves rows between the exchange's rank-major order (by rank, then local expert: what travels) and
// the expert-major order the grouped GEMM reads (by local expert, then rank).
void regroup_rows(const ExchangeCounts& counts, const char* from, char* to, size_t row_bytes, bool to_expert_major) {
  std::vector<int64_t> expert_start(static_cast<size_t>(counts.local + 1), 0);
  for (int64_t e = 0; e < counts.local; ++e) {
    expert_start[static_cast<size_t>(e + 1)] = expert_start[static_cast<size_t>(e)] + counts.received_for(e);
  }
  std::vector<int64_t> expert_fill(expert_start.begin(), expert_start.end() - 1);
  int64_t rank_major = 0;
  for (int64_t r = 0; r < counts.ranks; ++r) {
    for (int64_t e = 0; e < counts.local; ++e) {
      const int64_t rows = counts.received[static_cast<size_t>(r * counts.local + e)];
      int64_t& expert_major = expert_fill[static_cast<size_t>(e)];
      const size_t bytes = static_cast<size_t>(rows) * row_bytes;
      const size_t a = static_cast<size_t>(rank_major) * row_bytes, b = static_cast<size_t>(expert_major) * row_bytes;
      std::memcpy(to + (to_expert_major ? b : a), from + (to_expert_major ? a : b), bytes);
      rank_major += rows;
      expert_major += rows;
    }
  }
}

void zero_rows_after(const Tensor& rows, int64_t used) {
  const size_t row_bytes = rows.nbytes() / static_cast<size_t>(rows.size(0));
  std::memset(static_cast<char*>(rows.raw()) + static_cast<size_t>(used) * row_bytes, 0,
              static_cast<size_t>(rows.size(0) - used) * row_bytes);
}

int64_t total(const std::vector<int64_t>& counts) {
  int64_t sum = 0;
  for (int64_t count : counts) sum += count;
  return sum;
}

void add_dispatch(OpRegistry& registry) {
  registry.add({
      .name = "moe_dispatch_exchange",
      .summary = "expert parallelism's dispatch over the group attr `group` names (attr `ranks` = P, rank r holding "
                 "experts [r E / P, (r + 1) E / P)): xs [R, C] holds group_sizes[e] rows for each expert e in "
                 "expert order (moe_permute's buffer); every rank sends each expert's rows to the rank holding it "
                 "(counts first, then the rows). xe [P R, C] = the rows received, grouped by local expert, then by "
                 "source rank, then in the order sent, the rest zero; local_sizes [E / P] (i32) = the rows received "
                 "per local expert; received [P, E / P] (i32) = the rows from each rank for each local expert. Its "
                 "gradient is moe_return_exchange",
      .inputs = {"xs", "group_sizes"},
      .outputs = {"xe", "local_sizes", "received"},
      .attrs = {"group", "ranks"},
      .infer = dispatch_infer,
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      .bytes = [](const Metas& in, const Metas& out, const Attrs&) {
        return 2.0 * static_cast<double>(in[0].nbytes()) + static_cast<double>(out[0].nbytes());
      },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .comm = exchanged_rows,
      .placement = PlacementRule::None,
  });
}

void add_return(OpRegistry& registry) {
  registry.add({
      .name = "moe_return_exchange",
      .summary = "the inverse of moe_dispatch_exchange over the same group: ye [P R, C] in its xe's order (the "
                 "experts' outputs) goes back to the ranks the rows came from; ys [R, C] = each row where "
                 "moe_dispatch_exchange's xs had it (the rows past group_sizes' total zero). group_sizes [E] and "
                 "received [P, E / P] are the dispatch's. Its gradient is moe_dispatch_exchange",
      .inputs = {"ye", "group_sizes", "received"},
      .outputs = {"ys"},
      .attrs = {"group", "ranks"},
      .infer = return_infer,
      .flops = [](const Metas&, const Metas&, const Attrs&) { return 0.0; },
      .bytes = [](const Metas& in, const Metas& out, const Attrs&) {
        return static_cast<double>(in[0].nbytes()) + 2.0 * static_cast<double>(out[0].nbytes());
      },
      .precision = PrecisionRole::FollowsInputs,
      .differentiable = Differentiable::Yes,
      .comm = exchanged_rows,
      .placement = PlacementRule::None,
  });
}

}  // namespace

void add_expert_exchange_ops(OpRegistry& registry) {
  add_dispatch(registry);
  add_return(registry);
}

void moe_dispatch_exchange_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  const std::string op = "moe_dispatch_exchange";
  CollectiveGroup& group = collective_group_of(op, attrs);
  const Tensor& xs = inputs[0];
  ExchangeCounts counts = sent_counts(op, inputs[1], group.size(), xs.size(0));
  // Counts first: each rank learns how many rows of each of its experts every rank sends.
  std::vector<int32_t> sent32(counts.sent.begin(), counts.sent.end()), received32(sent32.size());
  group.all_to_all_bytes(sent32.data(), received32.data(), static_cast<size_t>(counts.local) * sizeof(int32_t));
  counts.received.assign(received32.begin(), received32.end());
  std::memcpy(outputs[2].raw(), received32.data(), received32.size() * sizeof(int32_t));
  int32_t* local_sizes = outputs[1].data<int32_t>();
  for (int64_t e = 0; e < counts.local; ++e) local_sizes[e] = static_cast<int32_t>(counts.received_for(e));
  const size_t row_bytes = xs.nbytes() / static_cast<size_t>(std::max<int64_t>(xs.size(0), 1));
  const int64_t arriving = total(counts.received);
  std::vector<char> arrived(static_cast<size_t>(arriving) * row_bytes);
  group.all_to_all_v_bytes(xs.raw(), row_bytes_by_rank(counts, true, row_bytes), arrived.data(),
                           row_bytes_by_rank(counts, false, row_bytes));
  // Checked once the exchange is done, so that no other rank is left waiting in it.
  if (arriving > outputs[0].size(0)) {
    fail("op '{}': the ranks send {} rows, more than the {} of output 'xe' (ranks whose xs differ in rows)", op,
         arriving, outputs[0].size(0));
  }
  regroup_rows(counts, arrived.data(), static_cast<char*>(outputs[0].raw()), row_bytes, /*to_expert_major=*/true);
  zero_rows_after(outputs[0], total(counts.received));
}

void moe_return_exchange_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  const std::string op = "moe_return_exchange";
  CollectiveGroup& group = collective_group_of(op, attrs);
  const Tensor& ys = outputs[0];
  ExchangeCounts counts = sent_counts(op, inputs[1], group.size(), ys.size(0));
  const int32_t* received = inputs[2].data<int32_t>();
  counts.received.assign(received, received + inputs[2].numel());
  const size_t row_bytes = ys.nbytes() / static_cast<size_t>(std::max<int64_t>(ys.size(0), 1));
  if (total(counts.received) > inputs[0].size(0)) {
    fail("op '{}': input 'received' counts {} rows, more than the {} of ye", op, total(counts.received),
         inputs[0].size(0));
  }
  std::vector<char> leaving(static_cast<size_t>(total(counts.received)) * row_bytes);
  regroup_rows(counts, static_cast<const char*>(inputs[0].raw()), leaving.data(), row_bytes,
               /*to_expert_major=*/false);
  // Back the way they came: what this rank received from rank r returns to r.
  group.all_to_all_v_bytes(leaving.data(), row_bytes_by_rank(counts, false, row_bytes), ys.raw(),
                           row_bytes_by_rank(counts, true, row_bytes));
  zero_rows_after(ys, total(counts.sent));
}

}  // namespace strata
