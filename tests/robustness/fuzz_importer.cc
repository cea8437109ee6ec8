// libFuzzer target: arbitrary bytes through the importer (with normalization). Whatever
// imports must verify, export, and import again from its own export. Built by run_fuzz.sh
// with clang++ -fsanitize=fuzzer,address,undefined; a crash, a sanitizer report or a broken
// property aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "compiler/onnx/exporter.h"
#include "compiler/onnx/importer.h"
#include "ir/verifier.h"

namespace {

[[noreturn]] void Fail(const char* what, const absl::Status& st) {
  std::fprintf(stderr, "fuzz_importer: %s: %s\n", what, st.ToString().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln;
  onnx_io::ImportOptions options;
  options.max_tensor_bytes = size_t{64} << 20;  // keep under libFuzzer's RSS limit
  auto graph = onnx_io::ImportModelBytes(
      std::string_view(reinterpret_cast<const char*>(data), size), options);
  if (!graph.ok()) return 0;
  if (absl::Status st = VerifyGraph(**graph); !st.ok()) Fail("imported graph fails verify", st);
  auto model = onnx_io::ExportModel(**graph);
  if (!model.ok()) Fail("imported graph fails export", model.status());
  std::string bytes;
  if (!model->SerializeToString(&bytes)) Fail("export does not serialize", absl::OkStatus());
  auto again = onnx_io::ImportModelBytes(bytes, options);
  if (!again.ok()) Fail("export does not re-import", again.status());
  return 0;
}
