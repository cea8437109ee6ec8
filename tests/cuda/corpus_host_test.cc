// Every kernel the code generator emits for the ONNX node conformance tests and the real
// models, compiled for the host (kiln_host_shim.h) and run on each node's reference inputs:
// the outputs must match the reference interpreter's. Prints what was covered.
#include <gtest/gtest.h>

#include <cstdio>

#include "compiler/codegen/cuda_kernel.h"
#include "tests/cuda/kernel_check.h"
#include "tests/cuda/kernel_corpus.h"

namespace kiln::testing {
namespace {

void CheckCorpus(const std::vector<CorpusGraph>& graphs, const CorpusStats& cs, const char* what) {
  std::vector<RecordedNode> nodes;
  RecordStats rs;
  int refused = 0;
  for (const CorpusGraph& g : graphs) {
    // A graph the reference refuses (an error the test expects) says nothing about kernels.
    const absl::Status st = RecordGraph(g.graph, g.feeds, codegen::Identifier(g.name), nodes, rs);
    if (!st.ok() && ++refused <= 5) std::printf("not run by the reference: %s: %s\n", g.name.c_str(), st.ToString().c_str());
  }
  for (const std::string& e : rs.errors) ADD_FAILURE() << "generator error: " << e;
  absl::StatusOr<HostCheck> hc = CheckOnHost(nodes, check::Tolerance{1e-4, 1e-5, {}});
  ASSERT_TRUE(hc.ok()) << hc.status();
  std::printf("%s: %zu graphs compiled (%d skipped, %d with ops the reference does not run), %d nodes, %d with generated "
              "kernels (%d kernels), %d refused by the generator; %d nodes checked on the host, %zu mismatches\n",
              what, graphs.size(), cs.skipped, refused, rs.nodes, rs.generated, rs.kernels, rs.unsupported,
              hc->checked, hc->failures.size());
  for (const std::string& f : hc->failures) ADD_FAILURE() << f;
  EXPECT_GT(hc->checked, 0);
}

TEST(CorpusHost, ConformanceKernelsMatchTheReference) {
  const std::string dir = ConformanceDir();
  if (dir.empty()) GTEST_SKIP() << "no ONNX conformance data ($KILN_ONNX_TESTS_DIR/node)";
  CorpusStats cs;
  CheckCorpus(LoadCorpus(dir, cs, false), cs, "conformance");
}

TEST(CorpusHost, RealModelKernelsMatchTheReference) {
  const std::string dir = ModelsDir();
  if (dir.empty()) GTEST_SKIP() << "no exported models (tests/models/export_models.py writes them)";
  CorpusStats cs;
  CheckCorpus(LoadCorpus(dir, cs, true), cs, "models");
}

}  // namespace
}  // namespace kiln::testing
