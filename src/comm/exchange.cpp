#include <algorithm>

#include "comm/algorithms.h"

namespace strata::comm {
namespace {
size_t pieces(size_t bytes) { return (bytes + kMaxMessageBytes - 1) / kMaxMessageBytes; }
}  // namespace

Task exchange(Context ctx, int to, const void* send_data, size_t send_bytes, int from, void* recv_data,
              size_t recv_bytes) {
  size_t sends = to >= 0 ? pieces(send_bytes) : 0;
  size_t recvs = from >= 0 ? pieces(recv_bytes) : 0;
  if (sends + recvs == 0) co_return;
  RequestSet requests(ctx.op, ctx.channel, ctx.tag, sends + recvs);
  for (size_t i = 0; i < recvs; ++i) {
    size_t offset = i * kMaxMessageBytes;
    requests.recv(i, static_cast<std::byte*>(recv_data) + offset, std::min(kMaxMessageBytes, recv_bytes - offset),
                  from);
  }
  for (size_t i = 0; i < sends; ++i) {
    size_t offset = i * kMaxMessageBytes;
    requests.send(recvs + i, static_cast<const std::byte*>(send_data) + offset,
                  std::min(kMaxMessageBytes, send_bytes - offset), to);
  }
  co_await requests.all();
}

Task dissemination_barrier(Context ctx) {
  const int p = ctx.size();
  const int r = ctx.rank();
  for (int distance = 1; distance < p; distance *= 2) {
    RequestSet requests(ctx.op, ctx.channel, ctx.tag, 2);
    requests.recv(0, nullptr, 0, (r - distance + p) % p);
    requests.send(1, nullptr, 0, (r + distance) % p);
    co_await requests.all();
  }
}

}  // namespace strata::comm
