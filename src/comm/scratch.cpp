#include "comm/scratch.h"

#include <algorithm>
#include <new>
#include <utility>

namespace strata::comm {
namespace {
constexpr std::align_val_t kAlignment{64};
}

void ScratchPool::Free::operator()(std::byte* data) const { ::operator delete[](data, kAlignment); }

ScratchPool& ScratchPool::instance() {
  static ScratchPool pool;
  return pool;
}

ScratchPool::Lease ScratchPool::acquire(size_t bytes) {
  bytes = std::max<size_t>(bytes, 64);
  // The smallest free block that fits, unless it wastes more than half of itself.
  auto fit = free_.lower_bound(bytes);
  if (fit != free_.end() && fit->first <= 2 * bytes) {
    size_t capacity = fit->first;
    Block block = std::move(fit->second);
    free_.erase(fit);
    return Lease(this, capacity, std::move(block));
  }
  Block block(static_cast<std::byte*>(::operator new[](bytes, kAlignment)));
  return Lease(this, bytes, std::move(block));
}

ScratchPool::Lease& ScratchPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    give_back();
    pool_ = std::exchange(other.pool_, nullptr);
    capacity_ = other.capacity_;
    block_ = std::move(other.block_);
  }
  return *this;
}

ScratchPool::Lease::~Lease() { give_back(); }

void ScratchPool::Lease::give_back() {
  if (pool_ && block_) pool_->free_.emplace(capacity_, std::move(block_));
  pool_ = nullptr;
}

}  // namespace strata::comm
