#include "comm/calls.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/call_phases.h"
#include "comm/reduce_kernels.h"
#include "comm/scratch.h"
#include "core/error.h"

namespace strata::comm {
namespace {

Fingerprint fingerprint_of(const CallSpec& spec, uint64_t sequence) {
  Fingerprint print;
  print.sequence = sequence;
  print.count = spec.count;
  print.op = static_cast<int32_t>(spec.op);
  print.algorithm = static_cast<int32_t>(spec.algorithm);
  print.dtype = static_cast<int32_t>(spec.dtype);
  print.reduce = static_cast<int32_t>(spec.reduce);
  print.root = spec.root;
  print.barrier = spec.barrier ? 1 : 0;
  return print;
}

std::string describe_print(const Fingerprint& print) {
  CallSpec spec;
  spec.op = static_cast<Collective>(print.op);
  spec.count = print.count;
  spec.algorithm = static_cast<Algorithm>(print.algorithm);
  spec.dtype = static_cast<DType>(print.dtype);
  spec.reduce = static_cast<ReduceOp>(print.reduce);
  spec.root = print.root;
  spec.barrier = print.barrier != 0;
  return fmt::format("call #{} {}", print.sequence, describe_call(spec));
}

// One call's fingerprints, gathered over the group's control channel from
// construction on; lives in the call's coroutine frame (the buffers must not move).
class FingerprintExchange {
 public:
  FingerprintExchange(const Context& control, const Fingerprint& mine)
      : mine_(mine), prints_(static_cast<size_t>(control.size())),
        requests_(control.op, control.channel, control.tag, 1) {
    CallPhases::CheckTimer timer;
    MPI_Request request;
    int code = MPI_Iallgather(&mine_, sizeof(Fingerprint), MPI_BYTE, prints_.data(), sizeof(Fingerprint), MPI_BYTE,
                              control.channel.comm, &request);
    if (code != MPI_SUCCESS) control.op.abort_with(fmt::format("cannot exchange call fingerprints: {}", mpi_error_text(code)));
    requests_.adopt(0, request);
  }
  FingerprintExchange(const FingerprintExchange&) = delete;
  FingerprintExchange& operator=(const FingerprintExchange&) = delete;

  // Waits for every rank's fingerprint; throws naming each distinct call and its ranks when they differ.
  Task compare(const std::string& group_name) {
    CallPhases::CheckTimer timer;
    co_await requests_.all();
    if (std::all_of(prints_.begin(), prints_.end(), [&](const Fingerprint& p) { return p == mine_; })) co_return;
    fail("comm call check: the ranks of group '{}' disagree about a call: {}", group_name, describe_disagreement(prints_));
  }

 private:
  Fingerprint mine_;
  std::vector<Fingerprint> prints_;
  RequestSet requests_;
};

Context sibling(const Context& ctx, const Channel& channel) {
  return Context{ctx.op, channel, ctx.tag, ctx.chunk_bytes, ctx.depth};
}

// fp32 views of a reduction's input: the input itself for f32, else a widened copy.
struct Widened {
  ScratchPool::Lease copy;
  const float* own = nullptr;
};

Widened widen_input(const void* in, DType dtype, size_t count) {
  Widened result;
  if (dtype == DType::F32) {
    result.own = static_cast<const float*>(in);
    return result;
  }
  result.copy = ScratchPool::instance().acquire(count * sizeof(float));
  widen(result.copy.floats(), in, dtype, count);
  result.own = result.copy.floats();
  return result;
}

ReduceBuffers reduce_buffers(const CallSpec& spec, int group_size, void* out) {
  ReduceBuffers buffers;
  buffers.out = out;
  buffers.out_dtype = spec.dtype;
  buffers.op = spec.reduce == ReduceOp::Max ? ReduceOp::Max : ReduceOp::Sum;
  buffers.divisor = spec.reduce == ReduceOp::Avg ? static_cast<float>(group_size) : 1.0f;
  return buffers;
}

Task all_reduce_call(Context ctx, GroupState* group, CallSpec spec, const void* in, void* out) {
  Widened input = widen_input(in, spec.dtype, spec.count);
  ReduceBuffers buffers = reduce_buffers(spec, ctx.size(), out);
  buffers.own = input.own;
  // f32 partial sums live in the output (overwritten later); bf16 ones in the widened copy.
  buffers.partial = spec.dtype == DType::F32 ? static_cast<float*>(out) : input.copy.floats();
  if (spec.algorithm == Algorithm::SharedMemory) {
    co_await shm_all_reduce(ctx, group, fingerprint_of(spec, ctx.op.label().sequence), buffers, spec.count);
  } else if (spec.algorithm == Algorithm::DirectSplit) {
    co_await direct_split_all_reduce(ctx, group, fingerprint_of(spec, ctx.op.label().sequence), in, spec.dtype,
                                     buffers, spec.count);
  } else if (spec.algorithm == Algorithm::DirectRead) {
    co_await direct_all_reduce(ctx, group, fingerprint_of(spec, ctx.op.label().sequence), in, spec.dtype, buffers,
                               spec.count);
  } else if (spec.algorithm == Algorithm::Hierarchical) {
    co_await hierarchical_all_reduce(sibling(ctx, group->local), sibling(ctx, group->column), buffers, spec.count,
                                     spec.across);
  } else {
    co_await flat_all_reduce(ctx, spec.algorithm, buffers, spec.count);
  }
}

Task reduce_scatter_call(Context ctx, CallSpec spec, const void* in, void* out) {
  size_t total = spec.count * static_cast<size_t>(ctx.size());
  Widened input = widen_input(in, spec.dtype, total);
  ReduceBuffers buffers = reduce_buffers(spec, ctx.size(), out);
  buffers.own = input.own;
  ScratchPool::Lease partial;
  if (input.copy.bytes()) {
    buffers.partial = input.copy.floats();
  } else if (spec.algorithm != Algorithm::Mpi) {
    partial = ScratchPool::instance().acquire(total * sizeof(float));
    buffers.partial = partial.floats();
  }
  switch (spec.algorithm) {
    case Algorithm::Ring: co_await ring_reduce_scatter(ctx, buffers, total); break;
    case Algorithm::RecursiveHalvingDoubling: co_await rhd_reduce_scatter(ctx, buffers, spec.count); break;
    case Algorithm::Mpi: co_await mpi_reduce_scatter(ctx, buffers, spec.count); break;
    default: STRATA_CHECK(false, "reduce_scatter by {}", algorithm_name(spec.algorithm));
  }
}

Task all_gather_call(Context ctx, CallSpec spec, const void* in, void* out) {
  size_t width = dtype_size(spec.dtype);
  size_t block = spec.count * width;
  std::byte* mine = static_cast<std::byte*>(out) + static_cast<size_t>(ctx.rank()) * block;
  if (mine != in) std::memmove(mine, in, block);
  switch (spec.algorithm) {
    case Algorithm::Ring:
      co_await ring_all_gather(ctx, out, spec.count * static_cast<size_t>(ctx.size()), width);
      break;
    case Algorithm::RecursiveDoubling: co_await rd_all_gather(ctx, out, block); break;
    case Algorithm::Mpi: co_await mpi_all_gather(ctx, out, block); break;
    default: STRATA_CHECK(false, "all_gather by {}", algorithm_name(spec.algorithm));
  }
}

Task broadcast_call(Context ctx, CallSpec spec, void* data) {
  size_t bytes = spec.count * dtype_size(spec.dtype);
  switch (spec.algorithm) {
    case Algorithm::Ring: co_await ring_broadcast(ctx, data, bytes, spec.root); break;
    case Algorithm::BinomialTree: co_await binomial_broadcast(ctx, data, bytes, spec.root); break;
    case Algorithm::Mpi: co_await mpi_broadcast(ctx, data, bytes, spec.root); break;
    default: STRATA_CHECK(false, "broadcast by {}", algorithm_name(spec.algorithm));
  }
}

Task all_to_all_call(Context ctx, GroupState* group, CallSpec spec, const void* in, void* out) {
  const size_t width = dtype_size(spec.dtype);
  const ExchangeLayout& layout = *spec.layout;
  switch (spec.algorithm) {
    case Algorithm::Pairwise:
      if (reads_directly(*group)) {
        co_await direct_all_to_all(ctx, group, fingerprint_of(spec, ctx.op.label().sequence), in, out, layout, width);
      } else {
        co_await pairwise_all_to_all(ctx, in, out, layout, width);
      }
      break;
    case Algorithm::Hierarchical:
      if (spec.op == Collective::AllToAllV) {
        co_await hierarchical_all_to_all_v(sibling(ctx, group->local), sibling(ctx, group->column), group->node_of_rank,
                                           in, out, layout, width);
      } else {
        co_await hierarchical_all_to_all(sibling(ctx, group->local), sibling(ctx, group->column), group->node_of_rank,
                                         in, out, spec.count * width);
      }
      break;
    case Algorithm::Mpi: co_await mpi_all_to_all(ctx, in, out, layout, width); break;
    default: STRATA_CHECK(false, "all_to_all by {}", algorithm_name(spec.algorithm));
  }
}

// The call itself, after or alongside its check.
Task call_body(Context ctx, GroupState* group, CallSpec spec, const void* in, void* out) {
  if (spec.barrier) {
    co_await dissemination_barrier(ctx);
    co_return;
  }
  if (spec.count == 0 && spec.op != Collective::AllToAllV) co_return;
  switch (spec.op) {
    case Collective::AllReduce: co_await all_reduce_call(ctx, group, spec, in, out); break;
    case Collective::ReduceScatter: co_await reduce_scatter_call(ctx, spec, in, out); break;
    case Collective::AllGather: co_await all_gather_call(ctx, spec, in, out); break;
    case Collective::Broadcast: co_await broadcast_call(ctx, spec, out); break;
    case Collective::AllToAll:
    case Collective::AllToAllV: co_await all_to_all_call(ctx, group, spec, in, out); break;
  }
}

}  // namespace

std::string describe_call(const CallSpec& spec) {
  if (spec.barrier) return "barrier";
  std::string detail = spec.op == Collective::AllToAllV ? fmt::format("counts per rank, {}", dtype_name(spec.dtype))
                                                         : fmt::format("count {}, {}", spec.count, dtype_name(spec.dtype));
  if (spec.op == Collective::AllReduce || spec.op == Collective::ReduceScatter) {
    detail += fmt::format(", {}", reduce_op_name(spec.reduce));
  }
  if (spec.op == Collective::Broadcast) detail += fmt::format(", root {}", spec.root);
  return fmt::format("{}({}, {})", collective_name(spec.op), detail, algorithm_name(spec.algorithm));
}

bool runs_on_segment(const GroupState& group, const CallSpec& spec) {
  if (spec.barrier || (spec.count == 0 && spec.op != Collective::AllToAllV)) return false;
  switch (spec.algorithm) {
    case Algorithm::SharedMemory:
    case Algorithm::DirectRead:
    case Algorithm::DirectSplit: return true;
    case Algorithm::Pairwise: return reads_directly(group);
    default: return false;
  }
}

std::string describe_disagreement(std::span<const Fingerprint> prints) {
  std::vector<std::pair<Fingerprint, std::vector<int>>> groups;
  for (int rank = 0; rank < static_cast<int>(prints.size()); ++rank) {
    const Fingerprint& print = prints[static_cast<size_t>(rank)];
    auto same = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == print; });
    if (same == groups.end()) {
      groups.push_back({print, {rank}});
    } else {
      same->second.push_back(rank);
    }
  }
  std::string detail;
  for (const auto& [print, ranks] : groups) {
    detail += fmt::format("{}rank{} {} made {}", detail.empty() ? "" : "; ", ranks.size() > 1 ? "s" : "",
                          fmt::join(ranks, ","), describe_print(print));
  }
  return detail;
}

Task collective_call(Context ctx, GroupState* group, CallSpec spec, const void* in, void* out) {
  const Fingerprint mine = fingerprint_of(spec, ctx.op.label().sequence);
  CallCheck check = group->config.call_check;
  // The one-host algorithms compare the fingerprints beside their data: the overlapped check would only repeat it.
  if (check == CallCheck::Overlapped && runs_on_segment(*group, spec)) check = CallCheck::Off;
  switch (check) {
    case CallCheck::Off: co_await call_body(ctx, group, spec, in, out); break;
    case CallCheck::Before: {
      std::exception_ptr mismatch;
      try {
        FingerprintExchange exchange(sibling(ctx, group->control), mine);
        co_await exchange.compare(group->name);
      } catch (const Error&) {
        mismatch = std::current_exception();
      }
      if (mismatch) {
        // The call will not run: it gives up its turn on the shared segment (on every rank alike).
        std::erase(group->shm_queue, mine.sequence);
        std::rethrow_exception(mismatch);
      }
      co_await call_body(ctx, group, spec, in, out);
      break;
    }
    case CallCheck::Overlapped: {
      FingerprintExchange exchange(sibling(ctx, group->control), mine);
      std::exception_ptr failure;
      try {
        co_await call_body(ctx, group, spec, in, out);
      } catch (const Error&) {
        failure = std::current_exception();
      }
      co_await exchange.compare(group->name);  // also before rethrowing: MPI still writes into `exchange`
      if (failure) std::rethrow_exception(failure);
      break;
    }
  }
}

}  // namespace strata::comm
