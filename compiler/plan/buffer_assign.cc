#include "compiler/plan/buffer_assign.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace kiln::plan {
namespace {

// A request after alignment, with the offset a placement run gives it.
struct Item {
  int64_t size = 0;  // aligned
  int64_t first = 0;
  int64_t last = 0;
};

enum class Order { kSize, kArea, kBreadth, kLongest, kFirstUse };
enum class GapRule { kBestFit, kFirstFit };

const char* OrderName(Order o) {
  switch (o) {
    case Order::kSize:
      return "size";
    case Order::kArea:
      return "size*lifetime";
    case Order::kBreadth:
      return "breadth";
    case Order::kLongest:
      return "lifetime";
    case Order::kFirstUse:
      return "first-use";
  }
  return "?";
}

absl::Status CheckRequests(const std::vector<BufferRequest>& requests, int64_t alignment) {
  if (alignment < 1)
    return absl::InvalidArgumentError(absl::StrCat("alignment ", alignment, " < 1"));
  int64_t total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const BufferRequest& r = requests[i];
    if (r.size_bytes < 0 || r.first_step < 0 || r.last_step < r.first_step) {
      return absl::InvalidArgumentError(absl::StrCat("buffer ", i, ": bad request (size ",
                                                     r.size_bytes, ", steps ", r.first_step, "..",
                                                     r.last_step, ")"));
    }
    // Padding and summing must not wrap: the arena can never exceed the naive sum.
    if (r.size_bytes > std::numeric_limits<int64_t>::max() - alignment ||
        __builtin_add_overflow(total, AlignUp(r.size_bytes, alignment), &total)) {
      return absl::InvalidArgumentError(absl::StrCat("buffer ", i, ": sizes overflow int64"));
    }
  }
  return absl::OkStatus();
}

std::vector<Item> MakeItems(const std::vector<BufferRequest>& requests, int64_t alignment) {
  std::vector<Item> items;
  items.reserve(requests.size());
  for (const BufferRequest& r : requests) {
    items.push_back({AlignUp(r.size_bytes, alignment), r.first_step, r.last_step});
  }
  return items;
}

// For each item, the aligned live bytes at the busiest step of its lifetime. The live sum only
// rises at some buffer's first step, so it suffices to evaluate it there; a sparse table
// answers each item's range maximum in O(1).
std::vector<int64_t> BusiestStepBytes(const std::vector<Item>& items) {
  std::vector<int64_t> firsts;
  for (const Item& it : items) firsts.push_back(it.first);
  std::sort(firsts.begin(), firsts.end());
  firsts.erase(std::unique(firsts.begin(), firsts.end()), firsts.end());
  const size_t n = firsts.size();
  auto lo = [&](int64_t s) {
    return std::lower_bound(firsts.begin(), firsts.end(), s) - firsts.begin();
  };
  auto hi = [&](int64_t s) {
    return std::upper_bound(firsts.begin(), firsts.end(), s) - firsts.begin();
  };
  std::vector<int64_t> delta(n + 1, 0);
  for (const Item& it : items) {
    delta[lo(it.first)] += it.size;
    delta[hi(it.last)] -= it.size;
  }
  std::vector<std::vector<int64_t>> table(1, std::vector<int64_t>(n));
  std::partial_sum(delta.begin(), delta.end() - 1, table[0].begin());
  for (size_t k = 1; (size_t{1} << k) <= n; ++k) {
    const std::vector<int64_t>& prev = table[k - 1];
    std::vector<int64_t> row(n - (size_t{1} << k) + 1);
    for (size_t i = 0; i < row.size(); ++i)
      row[i] = std::max(prev[i], prev[i + (size_t{1} << (k - 1))]);
    table.push_back(std::move(row));
  }
  std::vector<int64_t> busiest;
  for (const Item& it : items) {
    size_t a = lo(it.first), b = hi(it.last);  // [a, b) is non-empty: it.first is in it
    size_t k = std::bit_width(b - a) - 1;
    busiest.push_back(std::max(table[k][a], table[k][b - (size_t{1} << k)]));
  }
  return busiest;
}

// The placement order for one strategy. Ties fall back to size, then first use, then request
// index, so every run is deterministic.
std::vector<size_t> MakeOrder(const std::vector<Item>& items, Order order) {
  std::vector<__int128> key(items.size());
  std::vector<int64_t> busiest;
  if (order == Order::kBreadth) busiest = BusiestStepBytes(items);
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    const __int128 length = it.last - it.first + 1;
    switch (order) {
      case Order::kSize:
        key[i] = it.size;
        break;
      case Order::kArea:
        key[i] = length * it.size;
        break;
      case Order::kBreadth:
        key[i] = busiest[i];
        break;
      case Order::kLongest:
        key[i] = length;
        break;
      case Order::kFirstUse:
        key[i] = -static_cast<__int128>(it.first);
        break;
    }
  }
  std::vector<size_t> idx(items.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    if (key[a] != key[b]) return key[a] > key[b];
    if (items[a].size != items[b].size) return items[a].size > items[b].size;
    return items[a].first < items[b].first;
  });
  return idx;
}

// Which items' lifetimes overlap a given one, without a walk over every item: an item
// overlaps [a, b] when it is live at step a or first used in (a, b]. A segment tree over the
// steps holds each item in the O(log steps) nodes that cover its lifetime, so the items live
// at a lie on one root-to-leaf path; the others are a range of the items sorted by first use.
// Built once per assignment; a query costs the log plus the items live there.
class OverlapIndex {
 public:
  explicit OverlapIndex(const std::vector<Item>& items) : items_(items) {
    for (const Item& it : items) steps_ = std::max(steps_, it.last + 1);
    tree_.resize(4 * static_cast<size_t>(std::max<int64_t>(steps_, 1)));
    for (size_t i = 0; i < items.size(); ++i) Add(1, 0, steps_ - 1, i);
    by_first_.resize(items.size());
    std::iota(by_first_.begin(), by_first_.end(), 0);
    std::stable_sort(by_first_.begin(), by_first_.end(),
                     [&](size_t x, size_t y) { return items[x].first < items[y].first; });
  }

  // The items whose lifetimes overlap `it`'s and for which keep(index) holds.
  template <class Keep>
  void Overlapping(const Item& it, Keep keep, std::vector<size_t>& out) const {
    out.clear();
    size_t node = 1;  // the path to leaf it.first: the items live there
    for (int64_t lo = 0, hi = steps_ - 1;;) {
      for (size_t j : tree_[node]) {
        if (keep(j)) out.push_back(j);
      }
      if (lo == hi) break;
      const int64_t mid = (lo + hi) / 2;
      if (it.first <= mid) {
        node = 2 * node;
        hi = mid;
      } else {
        node = 2 * node + 1;
        lo = mid + 1;
      }
    }
    auto after = std::upper_bound(by_first_.begin(), by_first_.end(), it.first,
                                  [&](int64_t s, size_t j) { return s < items_[j].first; });
    for (; after != by_first_.end() && items_[*after].first <= it.last; ++after) {
      if (keep(*after)) out.push_back(*after);
    }
  }

 private:
  void Add(size_t node, int64_t lo, int64_t hi, size_t i) {
    const Item& it = items_[i];
    if (it.last < lo || hi < it.first) return;
    if (it.first <= lo && hi <= it.last) {
      tree_[node].push_back(i);
      return;
    }
    const int64_t mid = (lo + hi) / 2;
    Add(2 * node, lo, mid, i);
    Add(2 * node + 1, mid + 1, hi, i);
  }

  const std::vector<Item>& items_;
  int64_t steps_ = 0;
  std::vector<std::vector<size_t>> tree_;
  std::vector<size_t> by_first_;
};

// The offset for `it` among the placed items that are live with it (`live`, sorted by
// offset): the gap between neighbours that fits with the least slack (best fit) or the lowest
// gap that fits (first fit); on top of every live neighbour when no gap fits.
int64_t FindOffset(const Item& it, const std::vector<Item>& items, const std::vector<size_t>& live,
                   const std::vector<int64_t>& offsets, GapRule rule) {
  int64_t prev_end = 0;
  int64_t best = -1;
  int64_t best_slack = std::numeric_limits<int64_t>::max();
  for (size_t j : live) {
    const int64_t gap = offsets[j] - prev_end;
    if (gap >= it.size && gap - it.size < best_slack) {
      best = prev_end;
      best_slack = gap - it.size;
      if (rule == GapRule::kFirstFit || best_slack == 0) return best;
    }
    prev_end = std::max(prev_end, offsets[j] + items[j].size);
  }
  return best >= 0 ? best : prev_end;
}

// One greedy run; returns the arena size and fills `offsets` (indexed like `items`). Placed
// items of equal offset may come in any order: each has a size, so the second one's gap is
// negative and prev_end ends the same.
int64_t PlaceInOrder(const std::vector<Item>& items, const OverlapIndex& index,
                     const std::vector<size_t>& order, GapRule rule,
                     std::vector<int64_t>& offsets) {
  offsets.assign(items.size(), 0);
  std::vector<char> placed(items.size(), 0);
  std::vector<size_t> live;
  int64_t arena = 0;
  for (size_t i : order) {
    if (items[i].size == 0) continue;  // occupies nothing; offset 0 is as good as any
    index.Overlapping(
        items[i], [&](size_t j) { return placed[j] != 0; }, live);
    std::sort(live.begin(), live.end(), [&](size_t a, size_t b) {
      return offsets[a] != offsets[b] ? offsets[a] < offsets[b] : a < b;
    });
    const int64_t off = FindOffset(items[i], items, live, offsets, rule);
    offsets[i] = off;
    placed[i] = 1;
    arena = std::max(arena, off + items[i].size);
  }
  return arena;
}

}  // namespace

int64_t AlignUp(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

int64_t LiveLowerBound(const std::vector<BufferRequest>& requests, int64_t alignment) {
  // Sweep over lifetime events: +size at the first step, -size one past the last. All events
  // at one step apply before that step's live sum is read.
  std::vector<std::pair<int64_t, int64_t>> events;
  for (const BufferRequest& r : requests) {
    const int64_t size = AlignUp(r.size_bytes, alignment);
    events.emplace_back(r.first_step, size);
    events.emplace_back(r.last_step + 1, -size);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    live += events[i].second;
    if (i + 1 == events.size() || events[i + 1].first != events[i].first)
      peak = std::max(peak, live);
  }
  return peak;
}

absl::StatusOr<BufferAssignment> AssignBuffers(const std::vector<BufferRequest>& requests,
                                               const AssignOptions& options) {
  RETURN_IF_ERROR(CheckRequests(requests, options.alignment));
  BufferAssignment out;
  out.alignment = options.alignment;
  out.lower_bound_bytes = LiveLowerBound(requests, options.alignment);
  const std::vector<Item> items = MakeItems(requests, options.alignment);
  for (const Item& it : items) out.naive_bytes += it.size;

  std::vector<Order> orders = {Order::kSize};
  std::vector<GapRule> rules = {GapRule::kBestFit};
  if (options.search_orderings) {
    orders = {Order::kSize, Order::kArea, Order::kBreadth, Order::kLongest, Order::kFirstUse};
    rules = {GapRule::kBestFit, GapRule::kFirstFit};
  }
  out.arena_bytes = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> offsets;
  const OverlapIndex index(items);
  for (Order order : orders) {
    const std::vector<size_t> idx = MakeOrder(items, order);
    for (GapRule rule : rules) {
      const int64_t arena = PlaceInOrder(items, index, idx, rule, offsets);
      if (arena >= out.arena_bytes) continue;
      out.arena_bytes = arena;
      out.offsets = offsets;
      out.strategy =
          absl::StrCat(OrderName(order), rule == GapRule::kBestFit ? "/best-fit" : "/first-fit");
      // Nothing beats the live-set bound, so stop searching once it is met.
      if (arena == out.lower_bound_bytes) return out;
    }
  }
  return out;
}

absl::Status ValidatePlan(const BufferAssignment& plan,
                          const std::vector<BufferRequest>& requests) {
  RETURN_IF_ERROR(CheckRequests(requests, plan.alignment));
  if (plan.offsets.size() != requests.size()) {
    return absl::InternalError(
        absl::StrCat(plan.offsets.size(), " offsets for ", requests.size(), " buffers"));
  }
  const std::vector<Item> items = MakeItems(requests, plan.alignment);
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t off = plan.offsets[i];
    if (off < 0 || off % plan.alignment != 0 || off + items[i].size > plan.arena_bytes) {
      return absl::InternalError(absl::StrCat("buffer ", i, " at offset ", off, " (", items[i].size,
                                              " bytes) is misaligned or outside the ",
                                              plan.arena_bytes, "-byte arena"));
    }
  }
  // Sweep in order of first step, comparing each buffer with those still live.
  std::vector<size_t> idx(items.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](size_t a, size_t b) { return items[a].first < items[b].first; });
  std::vector<size_t> active;
  for (size_t i : idx) {
    std::erase_if(active, [&](size_t j) { return items[j].last < items[i].first; });
    for (size_t j : active) {
      const bool disjoint = plan.offsets[i] + items[i].size <= plan.offsets[j] ||
                            plan.offsets[j] + items[j].size <= plan.offsets[i];
      if (!disjoint && items[i].size > 0 && items[j].size > 0) {
        return absl::InternalError(
            absl::StrCat("buffers ", j, " and ", i, " are live together and overlap in memory"));
      }
    }
    active.push_back(i);
  }
  int64_t naive = 0;
  for (const Item& it : items) naive += it.size;
  if (plan.naive_bytes != naive ||
      plan.lower_bound_bytes != LiveLowerBound(requests, plan.alignment) ||
      plan.arena_bytes < plan.lower_bound_bytes || plan.arena_bytes > plan.naive_bytes) {
    return absl::InternalError(absl::StrCat("inconsistent totals: arena ", plan.arena_bytes,
                                            ", lower bound ", plan.lower_bound_bytes, ", naive ",
                                            plan.naive_bytes));
  }
  return absl::OkStatus();
}

}  // namespace kiln::plan
