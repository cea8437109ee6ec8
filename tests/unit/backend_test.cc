// runtime/backend.h and runtime/device.h: one parse of device strings, one backend per family.
#include "runtime/backend.h"

#include <gtest/gtest.h>

#include "compiler/compile.h"
#include "ir/builder.h"
#include "runtime/cpu/isa.h"
#include "runtime/device.h"

namespace kiln::runtime {
namespace {

TEST(ParseDevice, KnowsTheFourFormsAndNothingElse) {
  EXPECT_EQ(ParseDevice("reference")->family, DeviceFamily::kReference);
  EXPECT_EQ(ParseDevice("cpu")->family, DeviceFamily::kCpu);
  EXPECT_EQ(ParseDevice("cuda")->index, 0);
  EXPECT_EQ(ParseDevice("cuda:7")->family, DeviceFamily::kCuda);
  EXPECT_EQ(ParseDevice("cuda:123")->index, 123);
  for (const char* bad :
       {"", "CPU", "gpu", "cuda:", "cuda:-1", "cuda:1234", "cuda:1a", "cpu:0", " cpu", "cuda0"}) {
    EXPECT_FALSE(ParseDevice(bad).has_value()) << bad;
  }
}

TEST(FindBackend, EachFamilyHasOneBackendAndUnknownDevicesAreRefused) {
  ASSERT_EQ(Backends().size(), 3u);
  EXPECT_STREQ((*FindBackend("reference"))->name(), "reference");
  EXPECT_STREQ((*FindBackend("cpu"))->name(), "cpu");
  EXPECT_STREQ((*FindBackend("cuda:2"))->name(), "cuda");
  absl::StatusOr<const Backend*> none = FindBackend("tpu");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("unknown device 'tpu'"), std::string::npos);
  for (const Backend* b : Backends()) {
    int served = 0;
    for (const char* d : {"reference", "cpu", "cuda", "cuda:1"}) served += b->Serves(d);
    EXPECT_GE(served, 1) << b->name();
  }
}

TEST(FindBackend, FingerprintsPassesAndPrecisionFollowTheMachine) {
  const Backend& cpu = **FindBackend("cpu");
  const std::string fp = cpu.Fingerprint("cpu");
  EXPECT_EQ(fp.rfind("cpu:", 0), 0u) << fp;
  EXPECT_NE(fp.find(std::string(":isa=") + cpu::IsaName(cpu::ActiveIsa())), std::string::npos)
      << fp;
  EXPECT_EQ(fp, cpu.Fingerprint("cpu"));  // stable
  EXPECT_EQ(cpu.LowerPrecision(), cpu::HasBf16DotProduct() ? "bf16" : "");
  EXPECT_EQ(cpu.PassesOff().count("fuse_qdq"), cpu::HasInt8DotProduct() ? 0u : 1u);
  const Backend& cuda = **FindBackend("cuda:0");
  EXPECT_EQ(cuda.PassesOff(),
            (std::set<std::string>{"fold_pad", "fuse_concat_elementwise", "fuse_qdq"}));
  EXPECT_EQ(cuda.LowerPrecision(), "");
  EXPECT_EQ((*FindBackend("reference"))->Fingerprint("reference"), "reference");
}

TEST(FindBackend, BuildsAReferenceAndACpuEngineThatAgree) {
  GraphBuilder b;
  Value* x = b.Input("x", DType::kFloat32, {1, 4});
  b.Output(b.Op("Relu", {x}));
  std::unique_ptr<Graph> g = b.Build();
  absl::StatusOr<CompiledGraph> compiled = CompileGraph(*g, {});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const Tensor in = Tensor::FromFloat({-1, 2, -3, 4}, {1, 4});
  std::vector<std::vector<Tensor>> outs;
  for (const char* device : {"reference", "cpu"}) {
    auto engine = (*FindBackend(device))->Build(device, *compiled, BuildOptions{});
    ASSERT_TRUE(engine.ok()) << device << ": " << engine.status();
    std::vector<Tensor> out;
    ASSERT_TRUE((*engine)->Run({in}, out).ok()) << device;
    outs.push_back(std::move(out));
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(outs[0][0].data<float>()[i], outs[1][0].data<float>()[i]);
    EXPECT_EQ(outs[0][0].data<float>()[i], i % 2 ? 2.0f * (i / 2 + 1) : 0.0f);
  }
  // An unknown layout is the backend's INVALID_ARGUMENT, not a crash.
  BuildOptions bad;
  bad.layout = "diagonal";
  EXPECT_EQ((*FindBackend("cpu"))->Build("cpu", *compiled, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::runtime
