#include "runtime/cpu/in_place_append.h"

#include <algorithm>
#include <map>

namespace kiln::cpu {

std::vector<int> SoleReadInputs(const Graph& graph, const SlotBindings& bind,
                                const BuildContext& ctx) {
  std::map<int, int> reads;  // input slot -> operand uses
  for (int s : bind.inputs) reads[s] = 0;
  for (const auto& node : graph.nodes()) {
    for (const auto& [key, attr] : node->attrs) {
      if (attr.kind == Attribute::Kind::kGraph) return {};
    }
    for (const Value* v : node->inputs) {
      const int s = v ? ctx.SlotOf(v) : -1;
      auto it = reads.find(s);
      if (it != reads.end()) ++it->second;
    }
  }
  std::vector<int> sole;
  for (const auto& [slot, uses] : reads) {
    const bool output = std::count(bind.outputs.begin(), bind.outputs.end(), slot) > 0;
    const bool viewed = std::any_of(bind.views.begin(), bind.views.end(),
                                    [&](const auto& v) { return v.second == slot; });
    if (uses == 1 && !output && !viewed) sole.push_back(slot);
  }
  return sole;
}

std::vector<runtime::InPlaceAppend> AppendsOf(const BuildContext& ctx, const SlotBindings& bind) {
  std::vector<runtime::InPlaceAppend> appends;
  for (const auto& [in_slot, out_slot] : ctx.appends) {
    auto in = std::find(bind.inputs.begin(), bind.inputs.end(), in_slot);
    auto out = std::find(bind.outputs.begin(), bind.outputs.end(), out_slot);
    if (in == bind.inputs.end() || out == bind.outputs.end()) continue;
    if (std::count(bind.outputs.begin(), bind.outputs.end(), out_slot) != 1) continue;
    appends.push_back({static_cast<size_t>(in - bind.inputs.begin()),
                       static_cast<size_t>(out - bind.outputs.begin())});
  }
  return appends;
}

}  // namespace kiln::cpu
