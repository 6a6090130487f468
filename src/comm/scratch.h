#pragma once
// Reused working memory for algorithms. Fresh memory is slow to touch the
// first time (page faults), so buffers return to the pool after each call and
// the next call of a similar size gets them back. The pool keeps what it has
// for the life of the process; it is not thread-safe.
#include <cstddef>
#include <map>
#include <memory>

namespace strata::comm {

class ScratchPool {
  struct Free {
    void operator()(std::byte* data) const;
  };
  using Block = std::unique_ptr<std::byte[], Free>;

 public:
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    float* floats() const { return reinterpret_cast<float*>(block_.get()); }
    std::byte* bytes() const { return block_.get(); }

   private:
    friend class ScratchPool;
    Lease(ScratchPool* pool, size_t capacity, Block block)
        : pool_(pool), capacity_(capacity), block_(std::move(block)) {}
    void give_back();
    ScratchPool* pool_ = nullptr;
    size_t capacity_ = 0;
    Block block_;
  };

  static ScratchPool& instance();
  // At least `bytes` (64-byte aligned, contents undefined).
  Lease acquire(size_t bytes);

 private:
  std::multimap<size_t, Block> free_;
};

}  // namespace strata::comm
