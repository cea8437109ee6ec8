// NVRTC compiles every kernel the CUDA engine would generate (node kernels and library-call
// epilogues, as cuda::PlanNode emits them) for every ONNX node conformance test and real
// model, to a CUBIN for the H200's sm_90, on a machine without a GPU. Prints the count.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "compiler/codegen/cuda_kernel.h"
#include "runtime/cuda/cuda_engine.h"
#include "runtime/cuda/node_plan.h"
#include "runtime/cuda/nvrtc_compiler.h"
#include "tests/cuda/kernel_corpus.h"

namespace kiln::cuda {
namespace {

struct Tally {
  int graphs = 0, kernels = 0, modules = 0;
  double ms = 0;
  std::map<std::string, int> fallback;  // op type -> nodes left to the host fallback
};

// The engine's kernels for every graph, compiled a few hundred per NVRTC program.
void CompileAll(const std::vector<testing::CorpusGraph>& graphs, const std::string& arch, Tally& t) {
  std::vector<codegen::Kernel> pending;
  auto flush = [&]() {
    if (pending.empty()) return;
    absl::StatusOr<std::shared_ptr<const CompiledModule>> m =
        CompileModule(codegen::ModuleSource(pending), arch, "corpus" + std::to_string(t.modules));
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) t.ms += (*m)->compile_ms;
    t.kernels += static_cast<int>(pending.size());
    ++t.modules;
    pending.clear();
  };
  for (const testing::CorpusGraph& g : graphs) {
    ++t.graphs;
    const auto& nodes = g.graph->nodes();
    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::string name = codegen::Identifier(g.name + "_n" + std::to_string(i) + "_" + nodes[i]->op_type);
      absl::StatusOr<NodePlan> p = PlanNode(*nodes[i], name);
      if (!p.ok()) continue;  // malformed for the engine too: `kiln check` reports it
      if (p->kind == NodeKind::kFallback) ++t.fallback[nodes[i]->op_type];
      for (codegen::Kernel& k : p->kernels) pending.push_back(std::move(k));
    }
    if (pending.size() >= 300) flush();
  }
  flush();
}

TEST(Nvrtc, CompilesEveryGeneratedKernel) {
  if (!CudaCompiledIn()) GTEST_SKIP() << "this build has no CUDA toolkit (NVRTC)";
  testing::CorpusStats cs;
  std::vector<testing::CorpusGraph> graphs = testing::LoadCorpus(testing::ConformanceDir(), cs, false);
  std::vector<testing::CorpusGraph> models = testing::LoadCorpus(testing::ModelsDir(), cs, true);
  if (graphs.empty() && models.empty()) GTEST_SKIP() << "no conformance data and no exported models";
  Tally node, model;
  CompileAll(graphs, "sm_90", node);
  CompileAll(models, "sm_90", model);
  std::printf("NVRTC sm_90: %d kernels from %d conformance tests, %d kernels from %d models, %d modules, "
              "%.1f s compiling\n",
              node.kernels, node.graphs, model.kernels, model.graphs, node.modules + model.modules,
              (node.ms + model.ms) / 1000.0);
  EXPECT_GT(node.kernels + model.kernels, 0);
  // The real models run on device paths, except the ops the code generator has no kernel for
  // yet (docs/cuda-engine.md, Limits): the recurrent cells and Resize run on the host. Any
  // other op of a real model on the host is a regression.
  const std::set<std::string> host_ops = {"GRU", "LSTM", "RNN", "Resize"};
  for (const auto& [op, n] : model.fallback) {
    if (!host_ops.count(op)) ADD_FAILURE() << n << " " << op << " node(s) of the real models fall back";
  }
  std::string fallbacks;
  for (const auto& [op, n] : node.fallback) fallbacks += " " + op + "=" + std::to_string(n);
  std::printf("conformance nodes left to the host fallback:%s\n", fallbacks.c_str());
}

TEST(Nvrtc, ReportsCompileErrorsWithTheLog) {
  if (!CudaCompiledIn()) GTEST_SKIP() << "this build has no CUDA toolkit (NVRTC)";
  absl::StatusOr<std::shared_ptr<const CompiledModule>> m =
      CompileModule("extern \"C\" __global__ void broken(float* p0) { p0[0] = undeclared; }", "sm_90", "broken");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("undeclared"), std::string::npos) << m.status();
}

TEST(Nvrtc, RoundsEveryMultiplyAndAddLikeTheHostShim) {
  if (!CudaCompiledIn()) GTEST_SKIP() << "this build has no CUDA toolkit (NVRTC)";
  const std::vector<std::string> opts = NvrtcOptions("compute_90");
  EXPECT_NE(std::find(opts.begin(), opts.end(), "--fmad=false"), opts.end());
  EXPECT_EQ(std::find(opts.begin(), opts.end(), "--use_fast_math"), opts.end());
  // The PTX of a * b + c: a rounded multiply and a rounded add, never one fused rounding
  // (which NVRTC emits by default, and which the host shim's -ffp-contract=off never does).
  absl::StatusOr<std::shared_ptr<const CompiledModule>> m = CompileModule(
      "extern \"C\" __global__ void mad(const float* a, const float* b, const float* c, float* y) {\n"
      "  y[threadIdx.x] = a[threadIdx.x] * b[threadIdx.x] + c[threadIdx.x];\n}\n",
      "compute_90", "mad");
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string& ptx = (*m)->image;
  EXPECT_EQ(ptx.find("fma.rn.f32"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find("mul.rn.f32"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find("add.rn.f32"), std::string::npos) << ptx;
}

TEST(Nvrtc, PicksTheGpusOwnArchitectureOrPtxForNewerOnes) {
  if (!CudaCompiledIn()) GTEST_SKIP() << "this build has no CUDA toolkit (NVRTC)";
  EXPECT_EQ(*ArchFor(9, 0), "sm_90");
  // A future GPU gets PTX of the newest architecture NVRTC knows, for the driver to JIT.
  absl::StatusOr<std::string> future = ArchFor(99, 0);
  ASSERT_TRUE(future.ok()) << future.status();
  EXPECT_EQ(future->rfind("compute_", 0), 0u) << *future;
  EXPECT_FALSE(ArchFor(1, 0).ok());
}

}  // namespace
}  // namespace kiln::cuda
