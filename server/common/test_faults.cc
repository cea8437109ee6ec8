#include "server/common/test_faults.h"

#include <memory>

#include "compiler/passes/pass.h"
#include "compiler/pipeline.h"

namespace kiln::server {
namespace {

class PerturbConstantPass : public passes::Pass {
 public:
  std::string name() const override { return kPerturbConstantPass; }

 protected:
  absl::StatusOr<bool> RunImpl(Graph& graph) override {
    for (const auto& node : graph.mutable_nodes()) {
      for (Value*& in : node->inputs) {
        if (!in || !in->is_constant() || in->dtype != DType::kFloat32) continue;
        if (in->constant->numel() == 0) continue;
        Tensor t = in->constant->Clone();
        for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] += 1.0f;
        Value* perturbed = graph.AddConstant(in->name + "_perturbed", std::move(t));
        in = perturbed;
        graph.PruneUnusedValues();
        return true;
      }
    }
    return false;
  }
};

}  // namespace

absl::Status EnableTestFaults() {
  return RegisterTestPass(
      kPerturbConstantPass, [] { return std::make_unique<PerturbConstantPass>(); },
      "eliminate_dead_code");
}

}  // namespace kiln::server
