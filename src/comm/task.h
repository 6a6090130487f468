#pragma once
// Algorithms are C++20 coroutines: they read like blocking code, but each wait
// for messages suspends the coroutine, so one call can be driven step by step
// by Handle::test()/wait() while the caller computes. A Task starts suspended;
// co_await on a Task runs it as a child and resumes the parent when it ends.
#include <coroutine>
#include <cstddef>
#include <exception>
#include <utility>

namespace strata::comm {

// Coroutine frames come from per-thread free lists by size class instead of
// the heap: a call creates a few of them, and small calls are a microsecond.
void* allocate_frame(size_t bytes);
void release_frame(void* frame, size_t bytes) noexcept;

class [[nodiscard]] Task {
 public:
  struct promise_type {
    static void* operator new(size_t bytes) { return allocate_frame(bytes); }
    static void operator delete(void* frame, size_t bytes) noexcept { release_frame(frame, bytes); }
    std::coroutine_handle<> continuation;
    std::exception_ptr error;

    Task get_return_object() { return Task(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct FinalAwaiter {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> self) noexcept {
        std::coroutine_handle<> next = self.promise().continuation;
        return next ? next : std::noop_coroutine();
      }
      void await_resume() noexcept {}
    };
    FinalAwaiter final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { error = std::current_exception(); }
  };

  Task() = default;
  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      if (handle_) handle_.destroy();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (handle_) handle_.destroy();
  }

  // As a child of another coroutine.
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> parent) noexcept {
    handle_.promise().continuation = parent;
    return handle_;
  }
  void await_resume() const {
    if (handle_.promise().error) std::rethrow_exception(handle_.promise().error);
  }

  // As the root of an operation.
  void start() { handle_.resume(); }
  bool done() const { return handle_.done(); }
  std::exception_ptr error() const { return handle_.promise().error; }

 private:
  explicit Task(std::coroutine_handle<promise_type> handle) : handle_(handle) {}
  std::coroutine_handle<promise_type> handle_;
};

}  // namespace strata::comm
