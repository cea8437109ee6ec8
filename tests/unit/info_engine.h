// An engine that only reports an EngineInfo (what a build settled on) and runs nothing: for
// tests of the decisions the server takes from its engines' info.
#pragma once

#include <vector>

#include "runtime/engine.h"

namespace kiln::testing_util {

class InfoEngine : public runtime::Engine {
 public:
  explicit InfoEngine(runtime::EngineInfo info) : info_(std::move(info)) {}
  const runtime::EngineInfo& info() const override { return info_; }
  const std::vector<runtime::TensorSpec>& inputs() const override { return specs_; }
  const std::vector<runtime::TensorSpec>& outputs() const override { return specs_; }
  absl::Status Run(const std::vector<Tensor>&, std::vector<Tensor>&) override {
    return absl::OkStatus();
  }

 private:
  runtime::EngineInfo info_;
  std::vector<runtime::TensorSpec> specs_;
};

}  // namespace kiln::testing_util
