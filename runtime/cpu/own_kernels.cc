#include "runtime/cpu/own_kernels.h"

#include "runtime/cpu/layout_transpose.h"

namespace kiln::cpu {

std::unique_ptr<CpuKernel> MakeOwnKernel(BuildContext& ctx, const Node& node) {
  using Factory = std::unique_ptr<CpuKernel> (*)(BuildContext&, const Node&);
  static const Factory kFactories[] = {MakeViewKernel,
                                       MakeElementwiseKernel,
                                       MakeSoftmaxKernel,
                                       MakeLayerNormKernel,
                                       MakeLayoutTransposeKernel,
                                       MakeTransposeKernel,
                                       MakeGatherKernel,
                                       MakeConcatKernel,
                                       MakeReduceKernel,
                                       MakeSliceKernel,
                                       MakeCastKernel,
                                       MakeWhereKernel,
                                       MakeSplitKernel,
                                       MakeExpandKernel,
                                       MakePadKernel,
                                       MakeResizeKernel,
                                       MakeRecurrentKernel,
                                       MakeQuantizeKernel};
  for (Factory f : kFactories) {
    if (auto k = f(ctx, node)) return k;
  }
  return nullptr;
}

}  // namespace kiln::cpu
