// Ring algorithms. In the stream below, step t sends block (r - t - 1) to the
// right neighbour and receives block (r - t - 2) from the left one (mod p).
// Steps 0 .. p-2 reduce: the received partial sum of a block plus this rank's
// contribution is forwarded at the next step, and at step p-2 the block that
// arrives is this rank's own, now complete. Steps p-1 .. 2p-3 gather: each
// rank forwards the finished block it received the step before. Every block
// is cut into the same number of chunks, and each chunk moves as soon as the
// chunk it depends on has arrived, so the steps overlap.
#include <algorithm>

#include "comm/algorithms.h"
#include "comm/block_layout.h"
#include "comm/reduce_kernels.h"
#include "comm/scratch.h"
#include "core/error.h"

namespace strata::comm {
namespace {

struct RingJob {
  size_t count = 0;  // elements of the whole buffer, in size() blocks
  int first_step = 0;
  int last_step = 0;  // exclusive
  ReduceBuffers reduce;  // reduce steps: own, partial, op; final_block receives the finished own block
  void* final_block = nullptr;
  void* gathered = nullptr;  // gather steps: whole buffer of gather_width elements
  size_t gather_width = 0;
};

int wrap(long value, int size) { return static_cast<int>(((value % size) + size) % size); }

Task ring_stream(Context ctx, RingJob job) {
  const int p = ctx.size();
  const int r = ctx.rank();
  const BlockLayout blocks{job.count, p};
  const size_t first_step = static_cast<size_t>(job.first_step);
  // Chunks are sized by what the reduce steps carry (fp32), else by the gathered width.
  const size_t wire_width = first_step < static_cast<size_t>(p - 1) ? sizeof(float) : job.gather_width;
  const size_t chunk_elements = std::max<size_t>(1, std::min(ctx.chunk_bytes, kMaxMessageBytes) / wire_width);
  const size_t chunks = std::max<size_t>(1, (blocks.largest() + chunk_elements - 1) / chunk_elements);
  const size_t depth = static_cast<size_t>(std::max(1, ctx.depth));
  const size_t first = first_step * chunks;
  const size_t end = static_cast<size_t>(job.last_step) * chunks;
  const size_t reduce_end = static_cast<size_t>(p - 1) * chunks;  // first gather item
  const size_t gather_width = job.gather_width;
  const ReduceBuffers& red = job.reduce;

  ScratchPool::Lease landing;
  if (first < reduce_end) landing = ScratchPool::instance().acquire(depth * chunk_elements * sizeof(float));

  // Element range of chunk `c` of block `b`.
  auto piece = [&](int block, size_t chunk) {
    BlockLayout within{blocks.size(block), static_cast<int>(chunks)};
    return std::pair<size_t, size_t>{blocks.offset(block) + within.offset(static_cast<int>(chunk)),
                                     within.size(static_cast<int>(chunk))};
  };
  const int right = (r + 1) % p;
  const int left = (r + p - 1) % p;
  RequestSet requests(ctx.op, ctx.channel, ctx.tag, 2 * depth);

  auto post_send = [&](size_t item) {
    int step = static_cast<int>(item / chunks);
    auto [offset, length] = piece(wrap(static_cast<long>(r) - step - 1, p), item % chunks);
    if (length == 0) return;
    if (item < reduce_end) {
      const float* source = step == 0 ? red.own : red.partial;
      requests.send(depth + item % depth, source + offset, length * sizeof(float), right);
    } else {
      const std::byte* source = static_cast<const std::byte*>(job.gathered) + offset * gather_width;
      requests.send(depth + item % depth, source, length * gather_width, right);
    }
  };
  auto post_recv = [&](size_t item) {
    int step = static_cast<int>(item / chunks);
    auto [offset, length] = piece(wrap(static_cast<long>(r) - step - 2, p), item % chunks);
    if (length == 0) return;
    if (item < reduce_end) {
      requests.recv(item % depth, landing.floats() + (item % depth) * chunk_elements, length * sizeof(float), left);
    } else {
      std::byte* target = static_cast<std::byte*>(job.gathered) + offset * gather_width;
      requests.recv(item % depth, target, length * gather_width, left);
    }
  };
  auto absorb = [&](size_t item) {
    if (item >= reduce_end) return;
    int step = static_cast<int>(item / chunks);
    int block = wrap(static_cast<long>(r) - step - 2, p);
    auto [offset, length] = piece(block, item % chunks);
    const float* arrived = landing.floats() + (item % depth) * chunk_elements;
    if (step < p - 2) {
      combine(red.partial + offset, red.own + offset, arrived, length, red.op);
    } else {
      size_t out_width = dtype_size(red.out_dtype);
      std::byte* target = static_cast<std::byte*>(job.final_block) + (offset - blocks.offset(r)) * out_width;
      combine_final(target, red.out_dtype, red.own + offset, arrived, length, red.op, red.divisor);
    }
  };

  size_t sent = first, send_done = first, received = first, recv_done = first;
  while (recv_done < end || send_done < end) {
    bool moved = false;
    while (send_done < sent && requests.idle(depth + send_done % depth)) {
      ++send_done;
      moved = true;
    }
    while (recv_done < received && requests.idle(recv_done % depth)) {
      absorb(recv_done++);
      moved = true;
    }
    // A chunk is forwarded once the same chunk of the previous step is in.
    while (sent < end && sent < send_done + depth) {
      if (sent >= first + chunks && recv_done <= sent - chunks) break;
      post_send(sent++);
      moved = true;
    }
    // A gathered chunk may land only where no send is still reading.
    while (received < end && received < recv_done + depth) {
      if (received >= reduce_end && received >= first + reduce_end && send_done <= received - reduce_end) break;
      post_recv(received++);
      moved = true;
    }
    if (recv_done == end && send_done == end) break;
    STRATA_CHECK(moved || requests.busy(), "ring stream stalled at item {}", recv_done);
    co_await requests.any();
  }
}

}  // namespace

Task ring_all_reduce(Context ctx, ReduceBuffers buffers, size_t count) {
  const int p = ctx.size();
  if (count == 0) co_return;
  size_t width = dtype_size(buffers.out_dtype);
  BlockLayout blocks{count, p};
  if (p == 1) {
    store_final(buffers.out, buffers.out_dtype, buffers.own, count, buffers.divisor);
    co_return;
  }
  RingJob job;
  job.count = count;
  job.first_step = 0;
  job.last_step = 2 * (p - 1);
  job.reduce = buffers;
  job.final_block = static_cast<std::byte*>(buffers.out) + blocks.offset(ctx.rank()) * width;
  job.gathered = buffers.out;
  job.gather_width = width;
  co_await ring_stream(ctx, job);
}

Task ring_reduce_scatter(Context ctx, ReduceBuffers buffers, size_t count) {
  const int p = ctx.size();
  if (count == 0) co_return;
  if (p == 1) {
    store_final(buffers.out, buffers.out_dtype, buffers.own, count, buffers.divisor);
    co_return;
  }
  RingJob job;
  job.count = count;
  job.first_step = 0;
  job.last_step = p - 1;
  job.reduce = buffers;
  job.final_block = buffers.out;
  co_await ring_stream(ctx, job);
}

Task ring_all_gather(Context ctx, void* data, size_t count, size_t width) {
  const int p = ctx.size();
  if (count == 0 || p == 1) co_return;
  RingJob job;
  job.count = count;
  job.first_step = p - 1;
  job.last_step = 2 * (p - 1);
  job.gathered = data;
  job.gather_width = width;
  co_await ring_stream(ctx, job);
}

Task ring_broadcast(Context ctx, void* data, size_t bytes, int root) {
  const int p = ctx.size();
  const int r = ctx.rank();
  if (bytes == 0 || p == 1) co_return;
  const int position = (r - root + p) % p;  // distance from the root along the chain
  const bool has_left = position > 0;
  const bool has_right = position < p - 1;
  const int left = (r + p - 1) % p;
  const int right = (r + 1) % p;
  const size_t chunk_bytes = std::max<size_t>(1, std::min(ctx.chunk_bytes, kMaxMessageBytes));
  const size_t chunk_count = (bytes + chunk_bytes - 1) / chunk_bytes;
  const BlockLayout chunks{bytes, static_cast<int>(chunk_count)};
  const size_t depth = static_cast<size_t>(std::max(1, ctx.depth));
  std::byte* base = static_cast<std::byte*>(data);
  RequestSet requests(ctx.op, ctx.channel, ctx.tag, 2 * depth);

  size_t received = 0, recv_done = has_left ? 0 : chunk_count;
  size_t sent = 0, send_done = has_right ? 0 : chunk_count;
  if (!has_left) received = chunk_count;
  while (recv_done < chunk_count || send_done < chunk_count) {
    while (has_right && send_done < sent && requests.idle(depth + send_done % depth)) ++send_done;
    while (has_left && recv_done < received && requests.idle(recv_done % depth)) ++recv_done;
    while (has_left && received < chunk_count && received < recv_done + depth) {
      int c = static_cast<int>(received);
      requests.recv(received % depth, base + chunks.offset(c), chunks.size(c), left);
      ++received;
    }
    while (has_right && sent < chunk_count && sent < send_done + depth && sent < recv_done) {
      int c = static_cast<int>(sent);
      requests.send(depth + sent % depth, base + chunks.offset(c), chunks.size(c), right);
      ++sent;
    }
    if (recv_done == chunk_count && send_done == chunk_count) break;
    co_await requests.any();
  }
}

}  // namespace strata::comm
