#include "server/generate/step_buffers.h"

#include <set>
#include <utility>

namespace kiln::server::generate {

StepBuffers& StepBufferSet::For(int64_t rows, int64_t count, int64_t past, int64_t group) {
  const std::vector<int64_t> key{rows, count, past, group};
  if (group >= 0 && static_cast<size_t>(group) < kKeptGroups) {
    if (decode_.size() <= static_cast<size_t>(group))
      decode_.resize(static_cast<size_t>(group) + 1);
    StepBuffers& kept = decode_[static_cast<size_t>(group)];
    if (kept.key != key) {
      spare_.Keep(std::move(kept.in));  // the new shape's tensors are made on this memory
      spare_.Keep(std::move(kept.out));
      kept = StepBuffers{key, {}, {}, {}};
    }
    return kept;
  }
  for (auto it = prefill_.begin(); it != prefill_.end(); ++it) {
    if (it->key == key) {
      prefill_.splice(prefill_.begin(), prefill_, it);
      return prefill_.front();
    }
  }
  prefill_.push_front(StepBuffers{key, {}, {}, {}});
  if (prefill_.size() > kKeptPrefill) prefill_.pop_back();
  return prefill_.front();
}

void StepBufferSet::TrimGroups(size_t groups) {
  if (decode_.size() > groups) decode_.resize(groups);
}

void StepBufferSet::Clear() {
  decode_.clear();
  prefill_.clear();
  spare_.Clear();
}

int64_t StepBufferSet::HeldBytes() const {
  std::set<const void*> seen;
  int64_t bytes = spare_.bytes();
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
  for (const StepBuffers& b : prefill_) {
    add(b.in);
    add(b.out);
  }
  return bytes;
}

}  // namespace kiln::server::generate
