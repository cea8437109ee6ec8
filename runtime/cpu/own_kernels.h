// Internal to runtime/cpu: Kiln's own kernels (no oneDNN primitive), one factory per file.
// Each returns nullptr for nodes outside what it handles.
#pragma once

#include <memory>

#include "runtime/cpu/build_context.h"

namespace kiln::cpu {

std::unique_ptr<CpuKernel> MakeViewKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeElementwiseKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeSoftmaxKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeLayerNormKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeTransposeKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeGatherKernel(BuildContext& ctx, const Node& node);
std::unique_ptr<CpuKernel> MakeConcatKernel(BuildContext& ctx, const Node& node);

}  // namespace kiln::cpu
