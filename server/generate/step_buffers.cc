#include "server/generate/step_buffers.h"

#include <set>
#include <utility>

namespace kiln::server::generate {

StepBuffers& StepBufferSet::For(int64_t rows, int64_t count, int64_t past, int64_t group,
                                int lane) {
  const std::vector<int64_t> key{rows, count, past, group};
  SpareMemory& spare = spare_.at(static_cast<size_t>(lane));
  if (group >= 0 && static_cast<size_t>(group) < std::min(kKeptGroups, decode_.size())) {
    StepBuffers& kept = decode_[static_cast<size_t>(group)];
    if (kept.key != key) {
      spare.Keep(std::move(kept.in));  // the new shape's tensors are made on this memory
      spare.Keep(std::move(kept.out));
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
  if (prefill.size() > kKeptPrefill) prefill.pop_back();
  return prefill.front();
}

void StepBufferSet::TrimGroups(size_t groups) {
  if (decode_.size() > groups) decode_.resize(groups);
}

void StepBufferSet::Clear() {
  decode_.clear();
  for (auto& p : prefill_) p.clear();
  for (SpareMemory& s : spare_) s.Clear();
}

int64_t StepBufferSet::HeldBytes() const {
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const SpareMemory& s : spare_) bytes += s.bytes();
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
