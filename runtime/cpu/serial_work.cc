#include "runtime/cpu/serial_work.h"

#include <omp.h>

#include <string>

#include "ir/kiln_ops.h"
#include "runtime/cpu/matmul_spec.h"

namespace kiln::cpu {

absl::Status SerialKernel::Run(const ExecContext& ctx) {
  const int team = omp_get_max_threads();
  omp_set_num_threads(1);
  absl::Status st = inner_->Run(ctx);
  omp_set_num_threads(team);
  return st;
}

// Below 64K a second thread's wake-up and barrier cost about what it saves. The threshold
// follows how OpenMP waits: while the team slept after every region (PASSIVE alone, ~45 us
// per wake-up here) products stayed serial up to 4M; with the bounded spin of
// base/openmp_env.h a wake-up is ~1 us, and splitting from 64K on measured (2 threads,
// compare_ort.js, against 4M): mobilenet_v2 b1 4.27 -> 3.48 ms (its 1280x1000 classifier and
// 7x7 convolutions), bert_tiny b8 0.45 -> 0.42 ms, resnet18/50 unchanged.
std::optional<int64_t> NodeWork(const Node& node) {
  const Value* y = node.output(0);
  if (!y || !y->shape || !IsStatic(*y->shape)) return std::nullopt;
  int64_t work = NumElements(StaticDims(*y->shape));
  const Value* a = node.input(0);
  const Value* w = node.input(1);
  if (node.op_type.find("MatMul") != std::string::npos || node.op_type == "Gemm") {
    if (a && a->shape && !a->shape->empty() && a->shape->back().known())
      work *= a->shape->back().value;
  } else if (node.op_type.find("Conv") != std::string::npos && w && w->shape &&
             IsStatic(*w->shape) && !w->shape->empty() && (*w->shape)[0].value > 0) {
    work *= NumElements(StaticDims(*w->shape)) / (*w->shape)[0].value;
  }
  return work;
}

bool IsSmallWork(const Node& node) {
  constexpr int64_t kSerialWork = 1 << 16;
  const std::optional<int64_t> work = NodeWork(node);
  return work && *work < kSerialWork;
}

// Only graphs below kThreadTuningWork (cpu_engine.cc: ~1 ms on one core here) are timed on
// one thread: larger ones always gain from the team, and timing them would cost a run of
// each at load.
int64_t EstimatedWork(const Graph& graph) {
  int64_t total = 0;
  for (const auto& n : graph.nodes()) total += NodeWork(*n).value_or(0);
  return total;
}

std::optional<CpuEngineOptions> NarrowAtOnce(const Graph& graph, const CpuEngineOptions& options) {
  if (options.run_threads <= 0 || (options.threads > 0 && options.run_threads >= options.threads)) {
    return std::nullopt;
  }
  for (const auto& n : graph.nodes()) {
    const std::string& op = n->op_type;
    const bool conv = (n->domain.empty() && (op == "Conv" || op == "ConvTranspose" ||
                                             op == "QLinearConv" || op == "ConvInteger")) ||
                      (n->domain == kKilnDomain && op == "FusedConv");
    const std::optional<MatMulSpec> product = conv ? std::nullopt : ReadMatMulSpec(*n);
    if (conv || (product && product->bf16)) {
      CpuEngineOptions narrow = options;
      narrow.threads = options.run_threads;
      narrow.run_threads = 0;
      return narrow;
    }
  }
  return std::nullopt;
}

}  // namespace kiln::cpu
