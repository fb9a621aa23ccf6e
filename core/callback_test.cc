#include "core/callback.h"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/allocation_counter.h"

namespace sluice {
namespace {

// The type contracts callers rely on.
static_assert(!std::is_copy_constructible_v<Callback<void()>>);
static_assert(!std::is_copy_assignable_v<Callback<void()>>);
static_assert(std::is_nothrow_move_constructible_v<Callback<void()>>);
static_assert(std::is_nothrow_move_assignable_v<Callback<void()>>);
static_assert(std::is_constructible_v<Callback<void(int)>, void (*)(int)>);
static_assert(!std::is_constructible_v<Callback<void(int)>, void (*)(std::string)>);
static_assert(!std::is_constructible_v<Callback<int()>, void (*)()>);
static_assert(sizeof(Callback<void()>) == 6 * sizeof(void*));
// A caller that still hands on a std::function allocates no more than it did.
static_assert(Callback<void()>::kStoredInPlace<std::function<void()>>);

// Counts its live copies and moved-from shells, and how often it was called.
struct Counts {
  int alive = 0;
  int destroyed = 0;
  int moves = 0;
  int calls = 0;
};

template <size_t kPadding>
class Counted {
 public:
  explicit Counted(Counts* counts) : counts_(counts) { ++counts_->alive; }
  Counted(const Counted& other) : counts_(other.counts_) { ++counts_->alive; }
  Counted(Counted&& other) noexcept : counts_(other.counts_) {
    ++counts_->alive;
    ++counts_->moves;
  }
  ~Counted() {
    --counts_->alive;
    ++counts_->destroyed;
  }
  void operator()() { ++counts_->calls; }

 private:
  Counts* counts_;
  [[maybe_unused]] std::array<char, kPadding> padding_{};
};
using SmallCounted = Counted<8>;
using BigCounted = Counted<64>;

// Small enough to be kept in place, but its move may throw: kept on the heap.
struct ThrowingMove {
  ThrowingMove() = default;
  ThrowingMove(const ThrowingMove&) = default;
  ThrowingMove(ThrowingMove&&) noexcept(false) {}
  void operator()() {}
};

static_assert(Callback<void()>::kStoredInPlace<SmallCounted>);
static_assert(!Callback<void()>::kStoredInPlace<BigCounted>);
static_assert(!Callback<void()>::kStoredInPlace<ThrowingMove>);

TEST(Callback, DefaultAndNullAreEmpty) {
  Callback<void()> none;
  Callback<void()> null = nullptr;
  EXPECT_FALSE(none);
  EXPECT_FALSE(null);
  EXPECT_TRUE(none == nullptr);
  EXPECT_TRUE(nullptr == null);
  Callback<void()> set = [] {};
  EXPECT_TRUE(set);
  EXPECT_TRUE(set != nullptr);
}

TEST(Callback, NullFunctionPointerAndEmptyStdFunctionMakeItEmpty) {
  void (*no_function)() = nullptr;
  std::function<void()> empty_function;
  EXPECT_FALSE(Callback<void()>(no_function));
  EXPECT_FALSE(Callback<void()>(empty_function));
  int calls = 0;
  std::function<void()> function = [&calls] { ++calls; };
  Callback<void()> from_function = function;
  ASSERT_TRUE(from_function);
  from_function();
  EXPECT_EQ(calls, 1);
}

TEST(Callback, PassesArgumentsAndReturnsTheResult) {
  Callback<int(int, int)> add = [](int a, int b) { return a + b; };
  EXPECT_EQ(add(2, 3), 5);
  std::string last;
  Callback<void(std::string)> take = [&last](std::string s) { last = std::move(s); };
  take(std::string(100, 'x'));
  EXPECT_EQ(last, std::string(100, 'x'));
}

TEST(Callback, HandsByValueArgumentsOnAsRvalues) {
  // A callable taking an rvalue reference accepts a by-value signature, as with std::function.
  std::unique_ptr<int> got;
  Callback<void(std::unique_ptr<int>)> keep = [&got](std::unique_ptr<int>&& p) {
    got = std::move(p);
  };
  keep(std::make_unique<int>(7));
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(*got, 7);
}

TEST(Callback, RunsAMutableCallableThroughAConstReference) {
  Callback<int()> counter = [n = 0]() mutable { return ++n; };
  const Callback<int()>& view = counter;
  EXPECT_EQ(view(), 1);
  EXPECT_EQ(view(), 2);
}

TEST(Callback, HoldsMoveOnlyCaptures) {
  auto owned = std::make_unique<int>(42);
  int* raw = owned.get();
  Callback<int*()> get = [p = std::move(owned)] { return p.get(); };
  Callback<int*()> moved = std::move(get);
  EXPECT_EQ(moved(), raw);
}

TEST(Callback, SmallCapturesAllocateNothing) {
  int x = 0;
  std::shared_ptr<int> shared = std::make_shared<int>(1);
  const uint64_t before = HeapAllocations();
  {
    Callback<void()> pointers = [&x, p = &x, q = &x, r = &x] { *p += *q + *r + x; };
    Callback<void()> shared_capture = [shared] { ++*shared; };
    Callback<void()> moved_pointers = std::move(pointers);
    Callback<void()> moved_shared = std::move(shared_capture);
    moved_pointers();
    moved_shared();
  }
  EXPECT_EQ(HeapAllocations() - before, 0u);
  EXPECT_EQ(*shared, 2);
  EXPECT_EQ(shared.use_count(), 1);
}

TEST(Callback, BigCapturesGoToTheHeapAndMoveWithoutMovingTheCallable) {
  Counts counts;
  const uint64_t before = HeapAllocations();
  {
    Callback<void()> big = BigCounted(&counts);
    EXPECT_EQ(HeapAllocations() - before, 1u);
    const int moves = counts.moves;
    Callback<void()> moved = std::move(big);
    Callback<void()> again;
    again = std::move(moved);
    EXPECT_EQ(counts.moves, moves);  // the pointer moved, not the callable
    EXPECT_FALSE(big);
    EXPECT_FALSE(moved);
    again();
    EXPECT_EQ(counts.calls, 1);
    EXPECT_EQ(counts.alive, 1);
  }
  EXPECT_EQ(counts.alive, 0);
}

TEST(Callback, ACallableWhoseMoveMayThrowGoesToTheHeap) {
  const uint64_t before = HeapAllocations();
  Callback<void()> callback = ThrowingMove();
  EXPECT_EQ(HeapAllocations() - before, 1u);
  Callback<void()> moved = std::move(callback);
  moved();
}

TEST(Callback, DestroysAnInPlaceCallableExactlyOnce) {
  Counts counts;
  {
    Callback<void()> a = SmallCounted(&counts);
    Callback<void()> b = std::move(a);
    Callback<void()> c;
    c = std::move(b);
    EXPECT_EQ(counts.alive, 1);
    c();
    EXPECT_EQ(counts.calls, 1);
  }
  EXPECT_EQ(counts.alive, 0);
}

TEST(Callback, MoveLeavesTheSourceEmptyAndTheTargetCallable) {
  int calls = 0;
  Callback<void()> source = [&calls] { ++calls; };
  Callback<void()> target = std::move(source);
  EXPECT_FALSE(source);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  ASSERT_TRUE(target);
  target();
  EXPECT_EQ(calls, 1);
  // A moved-from callback can be given a new callable.
  source = [&calls] { calls += 10; };
  source();
  EXPECT_EQ(calls, 11);
}

TEST(Callback, MoveAssignmentDropsTheOldCallable) {
  Counts old_counts;
  Counts new_counts;
  Callback<void()> target = SmallCounted(&old_counts);
  Callback<void()> source = BigCounted(&new_counts);
  target = std::move(source);
  EXPECT_EQ(old_counts.alive, 0);
  EXPECT_EQ(new_counts.alive, 1);
  target();
  EXPECT_EQ(old_counts.calls, 0);
  EXPECT_EQ(new_counts.calls, 1);
}

// A callback kept inside the capture of the one it is assigned to is taken before the capture
// holding it is destroyed: behind a pointer of the capture, and by value (which puts the capture
// on the heap: a Callback is bigger than kInlineSize).
TEST(Callback, TakesACallbackFromInsideTheCallableItReplaces) {
  int calls = 0;
  auto holder = std::make_unique<Callback<void()>>([&calls] { ++calls; });
  Callback<void()>* inner = holder.get();
  Callback<void()> outer = [owned = std::move(holder)] {};
  outer = std::move(*inner);  // *inner goes with the callable outer held
  ASSERT_TRUE(outer);
  outer();
  EXPECT_EQ(calls, 1);

  // Called, the callable tells where the callback it keeps is (inside the wrapper's storage).
  struct ByValue {
    Callback<void()> kept;
    Callback<void()>** where;
    void operator()() { *where = &kept; }
  };
  Callback<void()>* kept = nullptr;
  Callback<void()> wrapper = ByValue{Callback<void()>([&calls] { calls += 10; }), &kept};
  wrapper();
  ASSERT_NE(kept, nullptr);
  wrapper = std::move(*kept);
  wrapper();
  EXPECT_EQ(calls, 11);
}

TEST(Callback, MoveToItselfKeepsTheCallable) {
  Counts counts;
  Callback<void()> callback = SmallCounted(&counts);
  Callback<void()>& alias = callback;
  callback = std::move(alias);
  ASSERT_TRUE(callback);
  callback();
  EXPECT_EQ(counts.calls, 1);
  EXPECT_EQ(counts.alive, 1);
}

TEST(Callback, AssigningNullDestroysTheCallableAfterEmptying) {
  // The callable's destructor sees the callback already empty: it may be what destroys the
  // callback's owner's state.
  struct Watch {
    Callback<void()>* owner = nullptr;
    bool* saw_empty = nullptr;
    Watch(Callback<void()>* o, bool* s) : owner(o), saw_empty(s) {}
    Watch(Watch&& other) noexcept
        : owner(std::exchange(other.owner, nullptr)), saw_empty(other.saw_empty) {}
    ~Watch() {
      if (owner != nullptr) *saw_empty = (*owner == nullptr);
    }
    void operator()() {}
  };
  bool saw_empty = false;
  Callback<void()> callback;
  callback = Watch(&callback, &saw_empty);
  callback = nullptr;
  EXPECT_TRUE(saw_empty);
  EXPECT_FALSE(callback);
}

TEST(Callback, MovesThroughAVectorWithoutLosingCallables) {
  Counts counts;
  {
    std::vector<Callback<void()>> tasks;
    for (int i = 0; i < 100; ++i) {
      if (i % 2 == 0) {
        tasks.push_back(SmallCounted(&counts));
      } else {
        tasks.push_back(BigCounted(&counts));
      }
    }
    EXPECT_EQ(counts.alive, 100);
    for (Callback<void()>& task : tasks) task();
    EXPECT_EQ(counts.calls, 100);
  }
  EXPECT_EQ(counts.alive, 0);
}

}  // namespace
}  // namespace sluice
