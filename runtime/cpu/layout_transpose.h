// Internal to runtime/cpu: Transposes that only relabel a convolution's activation layout.
//
// A model that runs its convolutions in NCHW and its LayerNorm and MLP channels-last
// (ConvNeXt, every "LayerNorm2d") permutes [N,C,H,W] -> [N,H,W,C] after each convolution and
// back before the next. The convolutions here store their activations channels-last
// already, so the plain [N,H,W,C] tensor *is* the convolution's output, byte for byte, and
// the [N,C,H,W] tensor after the permute back is the MLP's output seen channels-last. Before,
// each permute cost two passes (a reorder of the convolution's layout to plain NCHW, then the
// transpose) and each permute back two more (the transpose, then a reorder into the next
// convolution's layout).
//
//  - To channels-last (perm [0, 2, ..., r-1, 1]): the Transpose's input may stay in the
//    convolutions' layout (it counts as a layout reader in MarkBlockable). When that layout
//    is channels-last, the output shares the input's blocked-arena buffer and the Transpose
//    runs nothing; in any other stored layout (16-channel blocks) it is one reorder straight
//    into the output's plain bytes.
//  - To channels-first (perm [0, r-1, 1, ..., r-2]): when the input is read by this
//    Transpose only and the output only by layout readers (convolutions, element-wise
//    programs in layout, ...), PlanLayoutTransposes puts both in one blocked-arena buffer
//    before the kernels are built: the input's producer writes its plain [N,H,W,C] there and
//    the output is that buffer described channels-last.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cpu/build_context.h"

namespace kiln::cpu {

// The perms moving axis 1 last ([0, 2, ..., r-1, 1]) and back ([0, r-1, 1, ..., r-2]).
std::vector<int64_t> ChannelsLastPerm(size_t rank);
std::vector<int64_t> ChannelsFirstPerm(size_t rank);

// A float32 Transpose of rank 3..5 moving the channel axis (1) last, the rest in order.
bool IsChannelsLastTranspose(const Node& node);

// The to-channels-first sharing above, decided from the slot table (after MarkBlockable,
// before any kernel is built: the input's producer must find its buffer already placed).
void PlanLayoutTransposes(const Graph& graph, BuildContext& ctx);

// The Transpose of a value stored in a layout, or of one PlanLayoutTransposes placed:
// nothing, or one reorder. nullptr for a plain Transpose (the own kernel runs it).
std::unique_ptr<CpuKernel> MakeLayoutTransposeKernel(BuildContext& ctx, const Node& node);

}  // namespace kiln::cpu
