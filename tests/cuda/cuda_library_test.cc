// How the engine uses the libraries, without a GPU: which cuDNN algorithm and math type a
// build takes from cudnnFindConvolutionForwardAlgorithmEx's results (as cuDNN documents
// them: fastest first, each with its status, workspace and math type), and where the
// libraries are looked for (library_search.h) and what `kiln devices` learns of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <unistd.h>

#include "runtime/cuda/cuda_engine.h"
#include "runtime/cuda/cuda_libs.h"
#include "runtime/cuda/cudnn_algo.h"
#include "runtime/cuda/devices.h"
#include "runtime/cuda/library_search.h"

namespace kiln::cuda {
namespace {

cudnnConvolutionFwdAlgoPerf_t Perf(cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math, size_t memory = 0,
                                   cudnnStatus_t status = CUDNN_STATUS_SUCCESS) {
  cudnnConvolutionFwdAlgoPerf_t p{};
  p.algo = algo;
  p.status = status;
  p.time = 1.f;
  p.memory = memory;
  p.mathType = math;
  return p;
}

TEST(CudnnAlgo, Tf32UsesTheDefaultMathNotDownConversion) {
  EXPECT_EQ(RequestedMathType(false), CUDNN_FMA_MATH);
  EXPECT_EQ(RequestedMathType(true), CUDNN_DEFAULT_MATH);
  EXPECT_NE(RequestedMathType(true), CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);  // would allow FP16
}

TEST(CudnnAlgo, NeverChoosesTileTransformsThatSpreadNonFiniteValues) {
  for (cudnnConvolutionFwdAlgo_t a : {CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
                                      CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED}) {
    EXPECT_FALSE(KeepsNonFiniteLocal(a)) << a;
  }
  for (cudnnConvolutionFwdAlgo_t a : {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                      CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT}) {
    EXPECT_TRUE(KeepsNonFiniteLocal(a)) << a;
  }
  EXPECT_FALSE(KeepsNonFiniteLocal(CUDNN_CONVOLUTION_FWD_ALGO_COUNT));  // e.g. a corrupt cache entry
}

TEST(CudnnAlgo, PicksTheFastestUsableResult) {
  const size_t limit = 1 << 20;
  const std::vector<cudnnConvolutionFwdAlgoPerf_t> found = {
      Perf(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, CUDNN_FMA_MATH),          // spreads NaN
      Perf(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_DEFAULT_MATH),  // TF32 only
      Perf(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_FMA_MATH, limit + 1),           // too much scratch
      Perf(CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, CUDNN_FMA_MATH, 0, CUDNN_STATUS_NOT_SUPPORTED),
      Perf(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_FMA_MATH, limit)};
  EXPECT_EQ(PickAlgorithm(found.data(), static_cast<int>(found.size()), false, limit), 4);
  EXPECT_EQ(PickAlgorithm(found.data(), static_cast<int>(found.size()), true, limit), 1);
  // The next usable one after a refused one (the fused call's NOT_SUPPORTED): none here.
  EXPECT_EQ(PickAlgorithm(found.data(), static_cast<int>(found.size()), false, limit, 5), -1);
  EXPECT_EQ(PickAlgorithm(found.data(), static_cast<int>(found.size()), true, limit, 2), 4);
  // Nothing usable: -1, never an out-of-range index.
  EXPECT_EQ(PickAlgorithm(found.data(), 4, false, limit), -1);
  EXPECT_EQ(PickAlgorithm(found.data(), 0, true, limit), -1);
}

size_t IndexOf(const std::vector<std::string>& v, const std::string& s) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), s) - v.begin());
}

TEST(CudaErrors, KnowsWhichErrorsLoseTheContext) {
  EXPECT_TRUE(IsStickyCudaError("step 12 (Conv 'c1'): cudaStreamSynchronize: an illegal memory access was "
                                "encountered (cudaErrorIllegalAddress)"));
  EXPECT_TRUE(IsStickyCudaError("cudaGraphLaunch: unspecified launch failure (cudaErrorLaunchFailure)"));
  // Not sticky: the context survives these, the next test may pass.
  EXPECT_FALSE(IsStickyCudaError("cudaMalloc: out of memory (cudaErrorMemoryAllocation)"));
  EXPECT_FALSE(IsStickyCudaError("cudnnConvolutionForward: CUDNN_STATUS_NOT_SUPPORTED"));
  EXPECT_FALSE(IsStickyCudaError("a test named cudaErrorIllegalAddress_case"));  // only the status's own form
}

TEST(LibrarySearch, OverrideFirstThenLoaderThenWheelsToolkitBuildAndDriver) {
  LibrarySearch s;
  s.override_path = "/opt/mine/lib::/opt/other/";  // an empty item and a trailing slash
  s.python_site_dirs = {"/venv/lib/python3.12/site-packages"};
  s.cuda_home = "/opt/cuda-13.0";
  s.build_dir = "/usr/local/cuda/lib64";  // also a standard folder: listed once
  const std::vector<std::string> c = LibraryCandidates("libcudnn.so.9", s);
  ASSERT_GE(c.size(), 10u);
  EXPECT_EQ(c[0], "/opt/mine/lib/libcudnn.so.9");
  EXPECT_EQ(c[1], "/opt/other/libcudnn.so.9");
  EXPECT_EQ(c[2], "libcudnn.so.9");  // LD_LIBRARY_PATH and the ld.so cache, through dlopen
  const std::string site = "/venv/lib/python3.12/site-packages/";
  EXPECT_EQ(c[3], site + "nvidia/cu13/lib/libcudnn.so.9");
  EXPECT_LT(IndexOf(c, site + "nvidia/cudnn/lib/libcudnn.so.9"), IndexOf(c, "/opt/cuda-13.0/lib64/libcudnn.so.9"));
  EXPECT_LT(IndexOf(c, site + "torch/lib/libcudnn.so.9"), IndexOf(c, "/opt/cuda-13.0/lib64/libcudnn.so.9"));
  EXPECT_LT(IndexOf(c, "/opt/cuda-13.0/lib64/libcudnn.so.9"), IndexOf(c, "/usr/local/cuda/lib64/libcudnn.so.9"));
  EXPECT_EQ(c.back(), "/usr/lib/wsl/lib/libcudnn.so.9");
  EXPECT_LT(IndexOf(c, "/usr/local/cuda/lib64/libcudnn.so.9"), IndexOf(c, "/usr/local/nvidia/lib64/libcudnn.so.9"));
  EXPECT_EQ(std::count(c.begin(), c.end(), "/usr/local/cuda/lib64/libcudnn.so.9"), 1);
}

TEST(LibrarySearch, WithoutAnyHintsStillTriesTheLoaderAndStandardFolders) {
  const std::vector<std::string> c = LibraryCandidates("libnvrtc.so.13", {});
  ASSERT_FALSE(c.empty());
  EXPECT_EQ(c[0], "libnvrtc.so.13");
  EXPECT_LT(IndexOf(c, "/usr/local/cuda/lib64/libnvrtc.so.13"), c.size());
  EXPECT_LT(IndexOf(c, "/usr/local/nvidia/lib64/libnvrtc.so.13"), c.size());
  for (const std::string& path : c) EXPECT_EQ(path.find("//"), std::string::npos) << path;
}

TEST(LibrarySearch, ReadsTheEnvironment) {
  setenv("KILN_CUDA_LIBRARY_PATH", "/x:/y", 1);
  unsetenv("CUDA_HOME");
  setenv("CUDA_PATH", "/cp", 1);
  const LibrarySearch s = SearchFromEnvironment("/built", false);
  EXPECT_EQ(s.override_path, "/x:/y");
  EXPECT_EQ(s.cuda_home, "/cp");
  EXPECT_EQ(s.build_dir, "/built");
  EXPECT_TRUE(s.python_site_dirs.empty());  // python3 is only asked when the rest failed
  unsetenv("KILN_CUDA_LIBRARY_PATH");
  unsetenv("CUDA_PATH");
}

TEST(LibrarySearch, AFailedLoadCarriesTheLoadersMessages) {
  // A file that exists but is no library: its dlerror() text must reach the status.
  const std::string dir = ::testing::TempDir() + "/kiln_libs_" + std::to_string(getpid());
  ASSERT_EQ(std::system(("mkdir -p " + dir + " && echo garbage > " + dir + "/libkiln_fake.so.1").c_str()), 0);
  setenv("KILN_CUDA_LIBRARY_PATH", dir.c_str(), 1);
  absl::StatusOr<std::string> bad = OpenLibraryFile("libkiln_fake.so.1");
  unsetenv("KILN_CUDA_LIBRARY_PATH");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(bad.status()));
  EXPECT_NE(bad.status().message().find(dir + "/libkiln_fake.so.1:"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("cannot open shared object file"), std::string::npos) << bad.status();
  // The override wins over every other place: a real library found through it.
  if (access("/usr/local/cuda/lib64/libnvrtc.so.13", F_OK) != 0) return;
  setenv("KILN_CUDA_LIBRARY_PATH", "/usr/local/cuda/lib64", 1);
  absl::StatusOr<std::string> good = OpenLibraryFile("libnvrtc.so.13");
  unsetenv("KILN_CUDA_LIBRARY_PATH");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_NE(good->find("libnvrtc.so.13"), std::string::npos) << *good;
}

TEST(LibrarySearch, KilnDevicesSaysWhichFileEachLibraryCameFrom) {
  const CudaReport& r = ProbeCuda();
  ASSERT_TRUE(r.missing.empty()) << r.missing.front();
  ASSERT_EQ(r.library_files.size(), 3u);
  for (const auto& [name, file] : r.library_files) {
    EXPECT_EQ(file.front(), '/') << name << " " << file;  // a resolved path, not a bare soname
  }
  EXPECT_TRUE(r.library_notes.empty()) << r.library_notes.front();
}

}  // namespace
}  // namespace kiln::cuda
