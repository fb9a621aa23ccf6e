// A move-only callable for the callbacks the request path makes and drops all the time: pipe
// wake-ups (one per read and per flush that waits) and event loop tasks.
//
// It takes what std::function takes (any callable with a matching signature, null, an empty
// std::function, which makes it empty) and reads like it (tests empty, compares with nullptr,
// calls through a const operator()), but it cannot be copied, and it is cheaper to make, move
// and destroy:
// - A callable of up to kInlineSize bytes (four pointers), aligned no more than a pointer, whose
//   move constructor cannot throw is kept in place: no allocation for `[this]`,
//   `[this, generation]`, `[self = shared_ptr]` (libstdc++'s std::function keeps only trivially
//   copyable captures of up to 16 bytes in place), nor for a std::function handed on by a caller
//   that still uses one. A bigger one, or one whose move may throw, goes to the heap.
// - A call is one indirect call. Moving copies the bytes when the callable is trivially
//   copyable or on the heap (the pointer moves), and destroying does nothing when it is
//   trivially copyable; only other in-place callables (a shared_ptr capture) go through their
//   table of two functions.
// Move-only captures (a unique_ptr) are allowed, which std::function refuses.
//
//   sluice::Callback<void(int)> done = [owned = std::make_unique<Job>()](int n) { owned->Run(n); };
//   sluice::Callback<void(int)> later = std::move(done);  // `done` is empty now
//   if (later) later(3);
//
// Thread contract: thread-compatible, like the callable it holds: one thread at a time, calls
// included (a call runs the callable as non-const, as std::function does).
#ifndef SLUICE_CORE_CALLBACK_H_
#define SLUICE_CORE_CALLBACK_H_

#include <cassert>
#include <cstddef>
#include <cstring>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace sluice {

template <typename Signature>
class Callback;

namespace callback_internal {

template <typename T>
struct IsStdFunction : std::false_type {};
template <typename Signature>
struct IsStdFunction<std::function<Signature>> : std::true_type {};

// Whether `f` is a null function pointer, member pointer or an empty std::function: a callable
// that would make std::function empty makes a Callback empty too.
template <typename F>
bool IsNull(const F& f) {
  if constexpr (std::is_pointer_v<F> || std::is_member_pointer_v<F> || IsStdFunction<F>::value) {
    return f == nullptr;
  } else {
    return false;
  }
}

}  // namespace callback_internal

// See the file comment. `R(Args...)` is the signature, as for std::function.
template <typename R, typename... Args>
class Callback<R(Args...)> {
 public:
  // Bytes of callable kept in place.
  static constexpr size_t kInlineSize = 4 * sizeof(void*);

  // Whether a callable of type F is kept in place (no allocation).
  template <typename F>
  static constexpr bool kStoredInPlace =
      sizeof(F) <= kInlineSize &&
      alignof(F) <= alignof(void*) && std::is_nothrow_move_constructible_v<F>;

  // Empty.
  Callback() noexcept = default;
  // Empty.
  Callback(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor): as std::function

  // Holds `f` (moved or copied in). Empty when `f` is a null pointer or an empty std::function.
  // Allocates only when `f` is not kStoredInPlace.
  template <typename F, typename D = std::decay_t<F>>
  requires(!std::is_same_v<D, Callback> && std::is_invocable_r_v<R, D&, Args...> &&
           std::is_constructible_v<D, F>)
      Callback(
          F&& f) {  // NOLINT(google-explicit-constructor): lambdas convert, as to std::function
    if (callback_internal::IsNull(f)) return;
    if constexpr (kStoredInPlace<D>) {
      ::new (static_cast<void*>(storage_.words)) D(std::forward<F>(f));
      invoke_ = &InvokeInPlace<D>;
      ops_ = std::is_trivially_copyable_v<D> ? nullptr : &kInPlaceOps<D>;
    } else {
      D* on_heap = new D(std::forward<F>(f));
      std::memcpy(storage_.words, &on_heap, sizeof(on_heap));
      invoke_ = &InvokeOnHeap<D>;
      ops_ = &kHeapOps<D>;
    }
  }

  // Takes `other`'s callable; `other` is left empty.
  Callback(Callback&& other) noexcept { TakeFrom(other); }

  // Drops the callable held and takes `other`'s; `other` is left empty. `other` may live inside
  // the callable held (a callback kept in a capture, which is then on the heap or behind a
  // pointer of the capture, and does not move when the callable does): it is taken before that
  // callable is destroyed. Moving a callback to itself changes nothing.
  // Always inline: a pipe moves a callback in and out for every read and flush that waits.
  [[gnu::always_inline]] Callback& operator=(Callback&& other) noexcept {
    if (this == &other) return *this;
    if (invoke_ == nullptr) {
      TakeFrom(other);
      return *this;
    }
    Callback dropped(std::move(*this));
    TakeFrom(other);
    return *this;
  }

  // Drops the callable held. The callback is already empty while the callable is destroyed.
  Callback& operator=(std::nullptr_t) noexcept {
    if (ops_ == nullptr) {
      invoke_ = nullptr;  // nothing to destroy
    } else {
      Callback dropped(std::move(*this));
    }
    return *this;
  }

  // As `*this = Callback(std::forward<F>(f))`.
  template <typename F>
  requires std::is_constructible_v<Callback, F> Callback& operator=(F&& f) {
    *this = Callback(std::forward<F>(f));
    return *this;
  }

  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;

  ~Callback() {
    if (ops_ != nullptr) ops_->destroy(storage_);
  }

  // Whether a callable is held.
  explicit operator bool() const noexcept { return invoke_ != nullptr; }

  // Whether the callback is empty (also `nullptr == callback` and `!=`).
  friend bool operator==(const Callback& callback, std::nullptr_t) noexcept {
    return callback.invoke_ == nullptr;
  }

  // Calls the callable. The callback must not be empty: std::function would throw; here it is a
  // bug in the caller, checked by an assert (without asserts, a call through a null pointer).
  R operator()(Args... args) const {
    assert(invoke_ != nullptr && "sluice::Callback called empty");
    return invoke_(storage_, std::forward<Args>(args)...);
  }

 private:
  // In place: the callable itself. On the heap: a pointer to it. Words rather than chars: a
  // char array would make every function with a Callback on its stack pay for a stack
  // protector check (-fstack-protector guards functions holding char arrays).
  struct Storage {
    void* words[kInlineSize / sizeof(void*)];
  };
  // What a callable other than a trivially copyable in-place one needs.
  struct Ops {
    // Moves the callable from `from` into `to` (raw storage) and destroys it in `from`. Null when
    // copying the bytes moves it (a callable on the heap: the pointer moves).
    void (*relocate)(Storage& from, Storage& to) noexcept;
    void (*destroy)(Storage& storage) noexcept;
  };

  template <typename F>
  static F& InPlace(Storage& storage) noexcept {
    return *std::launder(reinterpret_cast<F*>(storage.words));
  }
  template <typename F>
  static F* OnHeap(Storage& storage) noexcept {
    F* on_heap;
    std::memcpy(&on_heap, storage.words, sizeof(on_heap));
    return on_heap;
  }

  template <typename F>
  static R InvokeInPlace(Storage& storage, Args&&... args) {
    return static_cast<R>(std::invoke(InPlace<F>(storage), std::forward<Args>(args)...));
  }
  template <typename F>
  static R InvokeOnHeap(Storage& storage, Args&&... args) {
    return static_cast<R>(std::invoke(*OnHeap<F>(storage), std::forward<Args>(args)...));
  }
  template <typename F>
  static void RelocateInPlace(Storage& from, Storage& to) noexcept {
    F& moved = InPlace<F>(from);
    ::new (static_cast<void*>(to.words)) F(std::move(moved));
    moved.~F();
  }
  template <typename F>
  static void DestroyInPlace(Storage& storage) noexcept {
    InPlace<F>(storage).~F();
  }
  template <typename F>
  static void DestroyOnHeap(Storage& storage) noexcept {
    delete OnHeap<F>(storage);
  }

  template <typename F>
  static constexpr Ops kInPlaceOps{&RelocateInPlace<F>, &DestroyInPlace<F>};
  template <typename F>
  static constexpr Ops kHeapOps{nullptr, &DestroyOnHeap<F>};

  // Moves `other`'s callable into this empty callback and empties `other`.
  [[gnu::always_inline]] void TakeFrom(Callback& other) noexcept {
    if (other.invoke_ == nullptr) return;
    if (other.ops_ != nullptr && other.ops_->relocate != nullptr) {
      other.ops_->relocate(other.storage_, storage_);
    } else {
      // All the words, whatever the callable's size: those past it are copied indeterminate and
      // never read. GCC cannot see that (-Wmaybe-uninitialized, with sanitizers' inlining).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
      std::memcpy(storage_.words, other.storage_.words, kInlineSize);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
    }
    invoke_ = other.invoke_;
    ops_ = other.ops_;
    other.invoke_ = nullptr;
    other.ops_ = nullptr;
  }

  // Null when empty.
  R (*invoke_)(Storage&, Args&&...) = nullptr;
  // Null when empty or when the callable is trivially copyable and in place.
  const Ops* ops_ = nullptr;
  // Mutable: the call is const, the callable it runs is not (as with std::function).
  mutable Storage storage_;
};

}  // namespace sluice

#endif  // SLUICE_CORE_CALLBACK_H_
