#include "server/generate/step_buffers.h"

#include <set>
#include <utility>

namespace kiln::server::generate {

StepBuffers& StepBufferSet::For(int64_t rows, int64_t count, int64_t past, int64_t group,
                                int lane) {
  const std::vector<int64_t> key{rows, count, past, group};
  if (group >= 0 && static_cast<size_t>(group) < decode_.size()) {  // MakeGroups caps it
    StepBuffers& kept = decode_[static_cast<size_t>(group)];
    if (kept.key != key) {
      spare_.Keep(std::move(kept.in));  // the new shape's tensors are made on this memory
      spare_.Keep(std::move(kept.out));
      kept = StepBuffers{key, {}, {}, {}};
    }
    return kept;
  }
  std::list<StepBuffers>& prefill = prefill_.at(static_cast<size_t>(lane));
  for (auto it = prefill.begin(); it != prefill.end(); ++it) {
    if (it->key == key) {
      prefill.splice(prefill.begin(), prefill, it);
      return prefill.front();
    }
  }
  prefill.push_front(StepBuffers{key, {}, {}, {}});
  if (prefill.size() > kKeptPrefill) {
    spare_.Keep(std::move(prefill.back().in));  // for a later step's tensors, not freed
    spare_.Keep(std::move(prefill.back().out));
    prefill.pop_back();
  }
  return prefill.front();
}

void StepBufferSet::TrimGroups(size_t groups) {
  if (decode_.size() > groups) decode_.resize(groups);
}

void StepBufferSet::Park() {
  for (StepBuffers& b : decode_) {
    spare_.Keep(std::move(b.in));
    spare_.Keep(std::move(b.out));
  }
  decode_.clear();
  for (auto& lane : prefill_) {
    for (StepBuffers& b : lane) {
      spare_.Keep(std::move(b.in));
      spare_.Keep(std::move(b.out));
    }
    lane.clear();
  }
}

void StepBufferSet::Clear() {
  decode_.clear();
  for (auto& p : prefill_) p.clear();
  spare_.Clear();
  peak_kept_ = 0;
}

int64_t StepBufferSet::KeptBytes() const {
  std::set<const void*> seen;
  int64_t bytes = 0;
  auto add = [&](const std::vector<Tensor>& tensors) {
    for (const Tensor& t : tensors) {
      if (t.defined() && seen.insert(t.owner().get()).second) {
        bytes += static_cast<int64_t>(t.nbytes());
      }
    }
  };
  for (const StepBuffers& b : decode_) {
    add(b.in);
    add(b.out);
  }
  for (const auto& lane : prefill_) {
    for (const StepBuffers& b : lane) {
      add(b.in);
      add(b.out);
    }
  }
  return bytes;
}

}  // namespace kiln::server::generate
