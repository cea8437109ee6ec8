// libFuzzer target: the YAML configurations: the server's (ParseServerConfig, --config FILE)
// and a model's (ParseModelConfig: a repository config.yaml, and LoadModel's config_yaml,
// which any client with the token sends). Built by run_fuzz.sh (--target config) with
// clang++ -fsanitize=fuzzer,address,undefined.
//
// Properties: any text ends in a config or in INVALID_ARGUMENT (never an exception, a crash
// or a hang), and a model config that parses is finalized: buckets ascending, the last one
// max_batch_size, every range as FinalizeModelConfig promises.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "server/model/model_config.h"
#include "server/serving/config.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_config: %s\n", what.c_str());
  std::abort();
}

void CheckError(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kInvalidArgument) Fail("not INVALID_ARGUMENT: " + s.ToString());
}

void CheckModel(const kiln::server::ModelConfig& c) {
  if (c.max_batch_size < 1 || c.max_batch_size > 4096) Fail("max_batch_size out of range");
  if (c.batch_buckets.empty() || c.batch_buckets.back() != c.max_batch_size)
    Fail("buckets do not end at max_batch_size");
  for (size_t i = 0; i < c.batch_buckets.size(); ++i) {
    if (c.batch_buckets[i] < 1 || (i && c.batch_buckets[i] <= c.batch_buckets[i - 1]))
      Fail("buckets not ascending");
  }
  if (c.instances < 1 || c.max_queue_size < 1 || c.max_queue_delay_us < 0)
    Fail("a range was not checked");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  auto server = kiln::server::ParseServerConfig(yaml, "fuzz.yaml");
  if (!server.ok()) CheckError(server.status());
  auto model = kiln::server::ParseModelConfig(yaml, kiln::server::ModelConfig{}, "config_yaml");
  if (!model.ok()) {
    CheckError(model.status());
  } else {
    CheckModel(*model);
  }
  return 0;
}
