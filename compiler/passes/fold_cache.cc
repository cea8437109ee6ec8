#include "compiler/passes/fold_cache.h"

#include <cstdio>

#include "compiler/passes/node_key.h"

namespace kiln::passes {

bool FoldCache::Worth(const std::vector<const Tensor*>& inputs) {
  size_t bytes = 0;
  for (const Tensor* t : inputs) {
    if (t) bytes += t->nbytes();
  }
  return bytes >= kMinInputBytes;
}

std::string FoldCache::BuffersKey(const std::vector<const Tensor*>& inputs) {
  std::string k;
  for (const Tensor* t : inputs) {
    if (!t) {
      k += "-;";
      continue;
    }
    char addr[32];
    std::snprintf(addr, sizeof(addr), "%p", t->raw());
    k += std::string(addr) + ':' + std::to_string(static_cast<int>(t->dtype())) +
         ShapeToString(t->shape()) + ';';
  }
  return k;
}

std::string FoldCache::Key(const Node& node, const std::vector<const Tensor*>& inputs) {
  return OpAndAttrsKey(node) + "|" + std::to_string(node.outputs.size()) + "|" +
         BuffersKey(inputs);
}

std::optional<std::vector<Tensor>> FoldCache::Lookup(const std::string& key) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  ++hits_;
  return it->second.outputs;
}

std::optional<std::vector<Tensor>> FoldCache::Find(const Node& node,
                                                   const std::vector<const Tensor*>& inputs) const {
  return Lookup(Key(node, inputs));
}

void FoldCache::Store(const Node& node, const std::vector<const Tensor*>& inputs,
                      const std::vector<Tensor>& outputs) {
  Put(Key(node, inputs), inputs, outputs);
}

void FoldCache::Put(std::string key, const std::vector<const Tensor*>& inputs,
                    const std::vector<Tensor>& outputs) {
  Entry e;
  for (const Tensor* t : inputs) e.inputs.push_back(t ? *t : Tensor());
  e.outputs = outputs;
  std::lock_guard<std::mutex> lk(mu_);
  entries_.emplace(std::move(key), std::move(e));
}

std::vector<Tensor> FoldCache::Derive(const std::string& what,
                                      const std::vector<const Tensor*>& inputs,
                                      const std::function<std::vector<Tensor>()>& make) {
  std::string key = "derive|" + what + "|" + BuffersKey(inputs);
  if (std::optional<std::vector<Tensor>> hit = Lookup(key)) return std::move(*hit);
  std::vector<Tensor> made = make();
  Put(std::move(key), inputs, made);
  return made;
}

size_t FoldCache::hits() const {
  std::lock_guard<std::mutex> lk(mu_);
  return hits_;
}

size_t FoldCache::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return entries_.size();
}

}  // namespace kiln::passes
