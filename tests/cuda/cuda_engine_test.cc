// The CUDA engine: its GPU-free parts everywhere (device names, status mapping, what the
// device probe reports, a clean FAILED_PRECONDITION without a GPU, `kiln devices`), and,
// where a GPU exists, engines built and run against the reference interpreter. On a machine
// without one the device tests skip, saying why.
#include "runtime/cuda/cuda_engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>

#include "compiler/compile.h"
#include "compiler/shape/infer.h"
#include "ir/builder.h"
#include "ops/interpreter.h"
#include "runtime/check/compare.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/devices.h"
#include "tests/cuda/kernel_corpus.h"

namespace kiln::cuda {
namespace {

TEST(CudaDevices, ParsesDeviceNames) {
  EXPECT_EQ(ParseCudaDevice("cuda"), 0);
  EXPECT_EQ(ParseCudaDevice("cuda:0"), 0);
  EXPECT_EQ(ParseCudaDevice("cuda:12"), 12);
  for (const char* bad : {"cpu", "cuda:", "cuda:a", "cuda:-1", "cuda:0x1", "gpu:0", "cuda:12345"}) {
    EXPECT_FALSE(ParseCudaDevice(bad).has_value()) << bad;
  }
}

TEST(CudaStatus, MapsLibraryCodesToStatusCodes) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "x").ok());
  const absl::Status oom = CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc(&p, n)");
  EXPECT_TRUE(absl::IsResourceExhausted(oom));
  EXPECT_EQ(oom.message().rfind("cudaMalloc: ", 0), 0u) << oom;  // the call, without its arguments
  EXPECT_TRUE(absl::IsFailedPrecondition(CudaStatus(cudaErrorInsufficientDriver, "cudaGetDeviceCount")));
  EXPECT_TRUE(absl::IsFailedPrecondition(CudaStatus(cudaErrorNoDevice, "cudaGetDeviceCount")));
  EXPECT_TRUE(absl::IsInternal(CudaStatus(cudaErrorLaunchFailure, "cudaLaunchKernel")));
  EXPECT_TRUE(CudnnStatus(CUDNN_STATUS_SUCCESS, "x").ok());
  EXPECT_TRUE(absl::IsUnimplemented(CudnnStatus(CUDNN_STATUS_NOT_SUPPORTED, "cudnnConvolutionForward")));
  EXPECT_TRUE(absl::IsResourceExhausted(CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "cublasLtMatmul")));
  EXPECT_TRUE(absl::IsInternal(NvrtcStatus(NVRTC_ERROR_COMPILATION, "nvrtcCompileProgram")));
  EXPECT_EQ(CudaVersionString(13000), "13.0");
  EXPECT_EQ(CudaVersionString(12080), "12.8");
  EXPECT_EQ(CudaVersionString(0), "");
}

TEST(CudaDevices, ProbeReportsLibrariesAndGpusOrWhyNone) {
  const CudaReport& r = ProbeCuda();
  ASSERT_TRUE(r.compiled);
  EXPECT_FALSE(r.toolkit.empty());
  EXPECT_FALSE(r.nvrtc.empty());
  EXPECT_EQ(r.cudnn.rfind("9.", 0), 0u) << r.cudnn;
  EXPECT_FALSE(r.cublas.empty());
  EXPECT_TRUE(r.missing.empty()) << r.missing.front();  // cuDNN, cuBLASLt and NVRTC opened
  if (r.gpus.empty()) {
    EXPECT_FALSE(r.why_none.empty());
  }
  std::printf("toolkit %s, runtime %s, driver '%s', NVRTC %s, cuDNN %s, cuBLAS %s, %zu GPUs%s%s\n", r.toolkit.c_str(),
              r.runtime.c_str(), r.driver.c_str(), r.nvrtc.c_str(), r.cudnn.c_str(), r.cublas.c_str(), r.gpus.size(),
              r.gpus.empty() ? ": " : "", r.why_none.c_str());
}

// x[2, 3, 8, 8] -> Conv(3x3, pad 1) + bias -> Relu -> GlobalAveragePool -> Flatten -> Gemm
// -> Softmax, plus a LayerNorm branch and an op no generator has (TopK's values).
std::unique_ptr<Graph> SmallNet() {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  auto random = [&](std::vector<int64_t> shape) {
    Tensor t(DType::kFloat32, std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = d(rng);
    return t;
  };
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {2, 3, 8, 8});
  Value* c = b.Op("Relu", {b.Op("Conv", {x, b.Constant("w", random({16, 3, 3, 3})), b.Constant("b", random({16}))},
                                {{"pads", Attribute::Ints({1, 1, 1, 1})}})});
  Value* f = b.Op("Flatten", {b.Op("GlobalAveragePool", {c})});
  Value* g = b.Op("Gemm", {f, b.Constant("gw", random({16, 10})), b.Constant("gb", random({10}))});
  b.Output(b.Op("Softmax", {g}));
  b.Output(b.Op("LayerNormalization", {g, b.Constant("s", random({10})), b.Constant("lb", random({10}))}));
  b.Output(b.OpN("TopK", {g, b.Constant("k", Tensor::FromInt64({3}, {1}))}, 2)[0]);
  std::unique_ptr<Graph> graph = b.Build();
  EXPECT_TRUE(shape::InferShapes(*graph).ok());
  return graph;
}

TEST(CudaEngine, FailsCleanlyWithoutAGpu) {
  if (!ProbeCuda().gpus.empty()) GTEST_SKIP() << "this machine has a GPU (CudaEngineOnGpu covers it)";
  std::unique_ptr<Graph> g = SmallNet();
  absl::StatusOr<CompiledGraph> c = CompileGraph(*g, {});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::StatusOr<std::unique_ptr<runtime::Engine>> e = BuildCudaEngine(*c, {});
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(e.status())) << e.status();
  EXPECT_EQ(e.status().message().rfind("cuda:0: ", 0), 0u) << e.status();
}

TEST(KilnDevices, ReportsCudaAsJson) {
  const char* env = std::getenv("KILN_BIN");
  const std::string kiln = env && *env ? env : KILN_DEFAULT_BIN;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen((kiln + " devices --json").c_str(), "r"), pclose);
  ASSERT_TRUE(p);
  std::string out;
  std::array<char, 512> buf;
  while (fgets(buf.data(), buf.size(), p.get())) out += buf.data();
  EXPECT_NE(out.find("\"cuda\":{\"compiled\":true"), std::string::npos) << out;
  EXPECT_NE(out.find("\"cudnn\":\"9."), std::string::npos) << out;
  EXPECT_NE(out.find("\"isa\":"), std::string::npos) << out;
  EXPECT_NE(out.find("\"missing\":[]"), std::string::npos) << out;
  if (ProbeCuda().gpus.empty()) {
    EXPECT_NE(out.find("\"why_none\":\"cudaGetDeviceCount"), std::string::npos) << out;
  }
}

// gpu_check.sh reads kiln check's JSON after a shard is killed at its time limit: the file
// exists from the first test on, with how many tests the run had and why it stopped early.
TEST(KilnCheck, WritesItsJsonWithTheRunsProgress) {
  const std::string node = testing::ConformanceDir();
  if (node.empty()) GTEST_SKIP() << "no conformance tests";
  const char* env = std::getenv("KILN_BIN");
  const std::string kiln = env && *env ? env : KILN_DEFAULT_BIN;
  const std::string json = ::testing::TempDir() + "/kiln_check_" + std::to_string(getpid()) + ".json";
  const std::string cmd = kiln + " check --backend reference -q --json " + json + " " + node + "/test_abs " + node +
                          "/test_relu > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(json);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(out.find("\"stopped\":\"\",\"tests\":2,\"not_run\":0"), std::string::npos) << out;
  EXPECT_NE(out.find("\"pass\":2"), std::string::npos) << out;
  EXPECT_FALSE(std::ifstream(json + ".tmp").good());  // renamed into place, not left behind
  std::remove(json.c_str());
}

// --- on a GPU ----------------------------------------------------------------------------

class CudaEngineOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ProbeCuda().gpus.empty()) GTEST_SKIP() << "no GPU on this machine: " << ProbeCuda().why_none;
  }

  // Builds the engine for SmallNet and compares every output with the reference.
  void ExpectMatchesReference(const CudaEngineOptions& o, check::Tolerance tol) {
    std::unique_ptr<Graph> g = SmallNet();
    absl::StatusOr<CompiledGraph> c = CompileGraph(*g, {});
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<std::unique_ptr<runtime::Engine>> e = BuildCudaEngine(*c, o);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ((*e)->info().fallback_ops, 1);  // TopK
    Tensor x(DType::kFloat32, {2, 3, 8, 8});
    for (int64_t i = 0; i < x.numel(); ++i) x.mutable_data<float>()[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    absl::StatusOr<ref::TensorMap> want = ref::Run(*g, {{"x", x}});
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<Tensor> outs;
    for (int run = 0; run < 3; ++run) {  // the warm-up, then graph replays
      ASSERT_TRUE((*e)->Run({x}, outs).ok());
      for (size_t k = 0; k < outs.size(); ++k) {
        const check::Divergence d = check::CompareTensors(outs[k], want->at(g->outputs[k]->name), tol);
        EXPECT_TRUE(d.ok) << "output " << k << " run " << run << ": " << d.message;
      }
    }
    std::vector<Tensor> wrong = {Tensor(DType::kFloat32, {1, 3, 8, 8})};
    EXPECT_TRUE(absl::IsInvalidArgument((*e)->Run(wrong, outs)));
  }
};

TEST_F(CudaEngineOnGpu, Fp32MatchesTheReference) { ExpectMatchesReference({}, {1e-4, 1e-5}); }

TEST_F(CudaEngineOnGpu, EagerLaunchesMatchToo) {
  CudaEngineOptions o;
  o.cuda_graph = false;
  o.fuse_activations = false;
  ExpectMatchesReference(o, {1e-4, 1e-5});
}

// The debug mode gpu_check.sh reruns a failed smoke stage in: same numbers, per-step syncs.
TEST_F(CudaEngineOnGpu, DebugModeSynchronisesEveryStep) {
  CudaEngineOptions o;
  o.debug_sync = true;
  ExpectMatchesReference(o, {1e-4, 1e-5});
}

TEST_F(CudaEngineOnGpu, Tf32StaysWithinItsDocumentedError) {
  CudaEngineOptions o;
  o.tf32 = true;
  ExpectMatchesReference(o, {1e-2, 1e-3});
}

}  // namespace
}  // namespace kiln::cuda
