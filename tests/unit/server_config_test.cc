// Server and model configuration: the embedded default, errors that name the key, flags.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "server/grpc/grpc_credentials.h"
#include "server/model/model_config.h"
#include "server/serving/config.h"

namespace kiln::server {
namespace {

// The message a server YAML is refused with ("" when it parses).
std::string ServerError(const std::string& yaml) {
  return std::string(ParseServerConfig(yaml, "f").status().message());
}

TEST(ServerConfig, EmbeddedDefaultParses) {
  auto c = ParseServerConfig(EmbeddedDefaultConfig(), "embedded");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->grpc_address, "0.0.0.0:8500");
  EXPECT_EQ(c->model_repository, "config/models");
  EXPECT_EQ(c->model_defaults.device, "cpu");
  EXPECT_EQ(c->model_defaults.max_batch_size, 8);
}

TEST(ServerConfig, UnknownKeyIsNamed) {
  auto c = ParseServerConfig("server:\n  grpc_adress: x\n", "f.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("f.yaml: 'server.grpc_adress': unknown key"), std::string::npos)
      << c.status();
}

TEST(ServerConfig, BadValuesAreNamed) {
  EXPECT_NE(ParseServerConfig("log: {level: loud}", "f").status().message().find("log.level"),
            std::string::npos);
  EXPECT_NE(ParseServerConfig("server: {max_message_bytes: lots}", "f")
                .status().message().find("server.max_message_bytes"),
            std::string::npos);
  EXPECT_NE(ParseServerConfig("model_defaults: {device: tpu}", "f").status().message().find("tpu"),
            std::string::npos);
  EXPECT_FALSE(ParseServerConfig("[1, 2", "f").ok());
}

// Found by fuzz_config: a key that is not a scalar threw out of the parser. In a LoadModel
// config_yaml that ended kilnd.
TEST(ServerConfig, KeysThatAreNotScalarsAreInvalidArgument) {
  for (const char* yaml : {"{[1, 2]: 3}", "server: {[a]: 1}", "log: {{a: b}: c}",
                           "model_defaults: {[x]: 1}"}) {
    auto c = ParseServerConfig(yaml, "f.yaml");
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << yaml;
  }
  for (const char* yaml : {"{[1, 2]: 3}", "warmup: {[a]: 1}", "input_shapes: {[a]: [1]}",
                           "warmup: {input_ranges: {[a]: [0, 1]}}"}) {
    auto c = ParseModelConfig(yaml, ModelConfig{}, "config_yaml");
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << yaml;
  }
}

TEST(ServerConfig, UploadLimits) {
  auto c = ParseServerConfig(
      "server: {max_concurrent_uploads: 3, max_upload_bytes_in_flight: 2000000000, "
      "upload_stall_timeout_ms: 5000}", "f");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_concurrent_uploads, 3);
  EXPECT_EQ(c->max_upload_bytes_in_flight, 2000000000);
  EXPECT_EQ(c->upload_stall_timeout_ms, 5000);
  EXPECT_NE(ServerError("server: {max_concurrent_uploads: 0}").find("max_concurrent_uploads"), std::string::npos);
  EXPECT_NE(ServerError("server: {upload_stall_timeout_ms: 0}").find("upload_stall_timeout_ms"), std::string::npos);
  EXPECT_NE(ServerError("server: {max_model_bytes: 100, max_upload_bytes_in_flight: 99}")
                .find("must be >= server.max_model_bytes"), std::string::npos);
}

TEST(ServerConfig, MemoryAndResponseLimits) {
  auto c = ParseServerConfig(
      "server: {memory_budget_bytes: 1073741824, max_build_memory_bytes: 536870912, "
      "max_message_bytes: 1048576, http_api: {body_idle_timeout_ms: 2000, generate_threads: 16}}",
      "f");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->memory_budget_bytes, 1073741824);
  EXPECT_EQ(c->max_build_memory_bytes, 536870912);
  EXPECT_EQ(c->max_message_bytes, 1048576);
  EXPECT_EQ(c->http_api.body_idle_timeout_ms, 2000);
  EXPECT_EQ(c->http_api.generate_threads, 16);
  auto defaults = ParseServerConfig("", "f");
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->memory_budget_bytes, 0);  // 0: 80 % of the machine, set at start
  EXPECT_EQ(defaults->http_api.generate_threads, 64);
  // Negative: a message limit protobuf could not serialize, a budget too small to load
  // anything, a negative build cap, an idle timeout of 0.
  EXPECT_NE(ServerError("server: {max_message_bytes: 2147483648}").find("max_message_bytes"),
            std::string::npos);
  EXPECT_NE(ServerError("server: {memory_budget_bytes: 1000}").find("memory_budget_bytes"),
            std::string::npos);
  EXPECT_NE(ServerError("server: {max_build_memory_bytes: -1}").find("max_build_memory_bytes"),
            std::string::npos);
  EXPECT_NE(ServerError("server: {http_api: {body_idle_timeout_ms: 0}}").find("body_idle_timeout_ms"),
            std::string::npos);
  EXPECT_NE(ServerError("server: {http_api: {generate_threads: 0}}").find("generate_threads"),
            std::string::npos);
}

TEST(ServerConfig, TlsKeysAndTheirRules) {
  auto c = ParseServerConfig("server: {tls: {cert_file: c.pem, key_file: k.pem, client_ca_file: ca.pem}}", "f");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->tls.enabled());
  EXPECT_EQ(c->tls.client_ca_file, "ca.pem");
  EXPECT_FALSE(ParseServerConfig(EmbeddedDefaultConfig(), "embedded")->tls.enabled());
  const std::pair<const char*, const char*> bad[] = {
      {"server: {tls: {cert_file: c.pem}}", "'server.tls': cert_file and key_file go together"},
      {"server: {tls: {key_file: k.pem}}", "'server.tls': cert_file and key_file go together"},
      {"server: {tls: {client_ca_file: ca.pem}}", "'server.tls.client_ca_file': needs cert_file"},
      {"server: {tls: {certfile: c.pem}}", "'server.tls.certfile': unknown key"},
      {"server: {tls: [c.pem]}", "'server.tls': expected a map"},
  };
  for (const auto& [yaml, message] : bad) {
    auto r = ParseServerConfig(yaml, "f");
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_NE(r.status().message().find(message), std::string::npos) << r.status();
  }
}

TEST(ServerCredentials, NameTheFileThatIsMissingOrNotPem) {
  EXPECT_NE(MakeServerCredentials(TlsConfig{}).value(), nullptr);  // plaintext
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/not.pem") << "hello";
  auto missing = MakeServerCredentials(TlsConfig{dir + "/nope.pem", dir + "/not.pem", ""});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("server.tls.cert_file: cannot read"), std::string::npos);
  auto garbage = MakeServerCredentials(TlsConfig{dir + "/not.pem", dir + "/not.pem", ""});
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.status().message().find("is not a PEM file"), std::string::npos);
}

TEST(ServerConfig, FlagsOverrideTheFile) {
  const std::string path = ::testing::TempDir() + "/kilnd_test.yaml";
  std::ofstream(path) << "server: {grpc_address: '1.2.3.4:1'}\nlog: {level: warn}\n";
  auto c = LoadServerConfig({"--config", path, "--grpc-address=127.0.0.1:9", "--log-level",
                             "debug", "--model-repository", "/tmp/m", "--log-json"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->grpc_address, "127.0.0.1:9");
  EXPECT_EQ(c->log_level, "debug");
  EXPECT_EQ(c->model_repository, "/tmp/m");
  EXPECT_TRUE(c->log_json);
  std::remove(path.c_str());
}

TEST(ServerConfig, FlagErrors) {
  EXPECT_FALSE(LoadServerConfig({"--nope", "1"}).ok());
  EXPECT_FALSE(LoadServerConfig({"--grpc-address"}).ok());
  EXPECT_EQ(LoadServerConfig({"--config", "/does/not/exist.yaml"}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(LoadServerConfig({"--log-level", "loud"}).ok());
}

TEST(ModelConfig, DefaultBucketsArePowersOfTwo) {
  auto c = ParseModelConfig("max_batch_size: 6", ModelConfig{}, "m");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->batch_buckets, (std::vector<int64_t>{1, 2, 4, 6}));
}

TEST(ModelConfig, ReadsEveryKey) {
  auto c = ParseModelConfig(
      "max_batch_size: 4\nbatch_buckets: [2, 4]\nmax_queue_delay_us: 7\nmax_queue_size: 3\n"
      "instances: 2\ndevice: reference\nopt_level: O1\ncpu_layout: blocked\ncpu_winograd: false\n"
      "warmup: {seed: 9, rtol: 0.1, atol: 0.2, float_range: [0, 2], int_range: [1, 5],"
      " input_ranges: {ids: [0, 100]}}\n",
      ModelConfig{}, "m");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->batch_buckets, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(c->max_queue_delay_us, 7);
  EXPECT_EQ(c->instances, 2);
  EXPECT_EQ(c->device, "reference");
  EXPECT_EQ(c->cpu_layout, "blocked");
  EXPECT_EQ(ModelConfig{}.cpu_layout, "tune");
  EXPECT_FALSE(c->cpu_winograd);
  EXPECT_TRUE(ModelConfig{}.cpu_winograd);
  EXPECT_EQ(c->opt_level, OptLevel::kO1);
  EXPECT_EQ(c->warmup.seed, 9u);
  EXPECT_EQ(c->warmup.int_hi, 5);
  EXPECT_EQ(c->warmup.input_ranges.at("ids").second, 100.0);
}

TEST(ModelConfig, CpuThreadsSplitTheCoresAmongInstances) {
  ModelConfig c;
  EXPECT_EQ(CpuThreadsPerInstance(c, 8), 8);
  c.instances = 3;
  EXPECT_EQ(CpuThreadsPerInstance(c, 8), 2);
  c.instances = 16;
  EXPECT_EQ(CpuThreadsPerInstance(c, 8), 1);  // never zero
  c.cpu_threads = 5;
  EXPECT_EQ(CpuThreadsPerInstance(c, 8), 5);  // explicit wins
  EXPECT_GE(CpuThreadsPerInstance(ModelConfig{}), 1);
  auto parsed = ParseModelConfig("cpu_threads: 3\n", ModelConfig{}, "m");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->cpu_threads, 3);
}

TEST(ModelConfig, InputShapes) {
  auto c = ParseModelConfig("input_shapes: {input_ids: [-1, 128], pixel: [1, 3, 224, 224]}\n",
                            ModelConfig{}, "m");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->input_shapes.at("input_ids"), (std::vector<int64_t>{-1, 128}));
  EXPECT_EQ(c->input_shapes.at("pixel").size(), 4u);
  auto msg = [](const std::string& yaml) {
    return std::string(ParseModelConfig(yaml, ModelConfig{}, "m").status().message());
  };
  EXPECT_NE(msg("input_shapes: [1, 2]").find("'input_shapes': expected a map"), std::string::npos);
  EXPECT_NE(msg("input_shapes: {x: [-1, 0]}").find("'input_shapes.x': 0 is not a size"),
            std::string::npos);
  EXPECT_NE(msg("input_shapes: {x: seven}").find("'input_shapes.x': cannot read"),
            std::string::npos);
}

TEST(ModelConfig, BindInputs) {
  auto c = ParseModelConfig("bind_inputs: {use_cache_branch: false, x: [1, 2.5], on: true}\n",
                            ModelConfig{}, "m");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->bind_inputs.at("use_cache_branch"), std::vector<double>{0.0});
  EXPECT_EQ(c->bind_inputs.at("x"), (std::vector<double>{1.0, 2.5}));
  EXPECT_EQ(c->bind_inputs.at("on"), std::vector<double>{1.0});
  auto msg = [](const std::string& yaml) {
    return std::string(ParseModelConfig(yaml, ModelConfig{}, "m").status().message());
  };
  EXPECT_NE(msg("bind_inputs: [1]").find("'bind_inputs': expected a map"), std::string::npos);
  EXPECT_NE(msg("bind_inputs: {x: seven}").find("'bind_inputs.x': values are finite numbers"),
            std::string::npos);
  EXPECT_NE(msg("bind_inputs: {x: [.nan]}").find("'bind_inputs.x'"), std::string::npos);
  EXPECT_NE(msg("bind_inputs: {x: []}").find("'bind_inputs.x': needs at least one value"),
            std::string::npos);
  EXPECT_NE(msg("bind_inputs: {x: {a: 1}}").find("'bind_inputs.x': expected a value"),
            std::string::npos);
}

TEST(ModelConfig, Errors) {
  auto msg = [](const std::string& yaml) {
    return std::string(ParseModelConfig(yaml, ModelConfig{}, "m/config.yaml").status().message());
  };
  EXPECT_NE(msg("batch_buckets: [4, 2]").find("ascending"), std::string::npos);
  EXPECT_NE(msg("max_batch_size: 8\nbatch_buckets: [1, 4]").find("must equal max_batch_size"),
            std::string::npos);
  EXPECT_NE(msg("disabled_passes: [no_such_pass]").find("unknown pass 'no_such_pass'"),
            std::string::npos);
  EXPECT_NE(msg("instances: 0").find("instances"), std::string::npos);
  EXPECT_NE(msg("warmup: {float_range: [2, 1]}").find("warmup.float_range"), std::string::npos);
  EXPECT_NE(msg("colour: red").find("'colour': unknown key"), std::string::npos);
  EXPECT_NE(msg("cpu_threads: -1").find("'cpu_threads': must be in 0..1024"), std::string::npos);
  EXPECT_NE(msg("cpu_layout: nhwc").find("'cpu_layout': 'nhwc' is not one of: tune, primitive, blocked"),
            std::string::npos);
  EXPECT_NE(msg("cpu_winograd: maybe").find("cpu_winograd"), std::string::npos);
  EXPECT_EQ(msg("opt_level: O9").find("m/config.yaml: "), 0u);
  EXPECT_NE(msg("opt_level: O9").find("'opt_level': unknown optimization level"), std::string::npos);
  // A range no int64 holds is refused, not cast (found by fuzz_config).
  EXPECT_NE(msg("warmup: {int_range: [0, 1.88889e+23]}").find("warmup.int_range"), std::string::npos);
  EXPECT_NE(msg("generation: {mode: sometimes}").find("'generation.mode'"), std::string::npos);
  EXPECT_NE(msg("generation: {page_tokens: 0}").find("generation.page_tokens"), std::string::npos);
  EXPECT_NE(msg("generation: {prefill_budget: 0}").find("generation.prefill_budget"), std::string::npos);
  EXPECT_NE(msg("generation: {colour: red}").find("'generation.colour': unknown key"), std::string::npos);
  EXPECT_NE(msg("generation: {prefill_logits: first}").find("'generation.prefill_logits'"),
            std::string::npos);
  auto g = ParseModelConfig("generation: {max_sequences: 4, eos_token_ids: [2, 7], kv_cache_bytes: 1024}",
                            ModelConfig{}, "m");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->generation.max_sequences, 4);
  EXPECT_EQ(g->generation.eos_token_ids, (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(g->generation.kv_cache_bytes, 1024);
  EXPECT_EQ(g->generation.prefill_logits, "last");  // the default
  EXPECT_EQ(g->generation.tensors.input_ids, "input_ids");
  auto named = ParseModelConfig(
      "generation: {tensors: {input_ids: tokens, logits: scores, cache: {k_in: k_out}}}",
      ModelConfig{}, "m");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->generation.tensors.input_ids, "tokens");
  EXPECT_EQ(named->generation.tensors.attention_mask, "attention_mask");
  EXPECT_EQ(named->generation.tensors.logits, "scores");
  EXPECT_EQ(named->generation.tensors.cache.at("k_in"), "k_out");
  EXPECT_NE(msg("generation: {tensors: {tokens: x}}").find("'generation.tensors.tokens'"),
            std::string::npos);
  EXPECT_NE(msg("generation: {tensors: {logits: ''}}").find("must name a tensor"),
            std::string::npos);
  EXPECT_NE(msg("generation: {tensors: [a]}").find("'generation.tensors'"), std::string::npos);
  auto all = ParseModelConfig("generation: {prefill_logits: all}", ModelConfig{}, "m");
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->generation.prefill_logits, "all");
}

}  // namespace
}  // namespace kiln::server
