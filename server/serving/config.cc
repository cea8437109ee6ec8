#include "server/serving/config.h"

#include <cstdlib>
#include <map>

#include "base/file.h"
#include "server/common/yaml_read.h"

namespace kiln::server {
namespace {

absl::Status Bad(const std::string& key, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("'", key, "': ", why));
}

template <class T>
absl::Status Read(const YAML::Node& node, const std::string& key, T& out) {
  return ReadYaml(node, key, out, Bad);
}

absl::Status ApplyTlsSection(const YAML::Node& node, TlsConfig& t) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) return Bad("server.tls", "expected a map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string full = "server.tls." + key;
    if (key == "cert_file") {
      RETURN_IF_ERROR(Read(kv.second, full, t.cert_file));
    } else if (key == "key_file") {
      RETURN_IF_ERROR(Read(kv.second, full, t.key_file));
    } else if (key == "client_ca_file") {
      RETURN_IF_ERROR(Read(kv.second, full, t.client_ca_file));
    } else {
      return Bad(full, "unknown key");
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyHttpApiSection(const YAML::Node& node, HttpApiConfig& h) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) return Bad("server.http_api", "expected a map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string full = "server.http_api." + key;
    if (key == "max_body_bytes") {
      RETURN_IF_ERROR(Read(kv.second, full, h.max_body_bytes));
    } else if (key == "body_timeout_ms") {
      RETURN_IF_ERROR(Read(kv.second, full, h.body_timeout_ms));
    } else if (key == "body_idle_timeout_ms") {
      RETURN_IF_ERROR(Read(kv.second, full, h.body_idle_timeout_ms));
    } else if (key == "max_buffered_bytes") {
      RETURN_IF_ERROR(Read(kv.second, full, h.max_buffered_bytes));
    } else if (key == "threads") {
      RETURN_IF_ERROR(Read(kv.second, full, h.threads));
    } else if (key == "generate_threads") {
      RETURN_IF_ERROR(Read(kv.second, full, h.generate_threads));
    } else if (key == "max_json_depth") {
      RETURN_IF_ERROR(Read(kv.second, full, h.max_json_depth));
    } else {
      return Bad(full, "unknown key");
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyServerSection(const YAML::Node& node, ServerConfig& c) {
  if (!node.IsMap()) return Bad("server", "expected a map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string full = "server." + key;
    const YAML::Node& v = kv.second;
    if (key == "grpc_address") {
      RETURN_IF_ERROR(Read(v, full, c.grpc_address));
    } else if (key == "http_address") {
      RETURN_IF_ERROR(Read(v, full, c.http_address));
    } else if (key == "max_message_bytes") {
      RETURN_IF_ERROR(Read(v, full, c.max_message_bytes));
    } else if (key == "max_model_bytes") {
      RETURN_IF_ERROR(Read(v, full, c.max_model_bytes));
    } else if (key == "max_concurrent_uploads") {
      RETURN_IF_ERROR(Read(v, full, c.max_concurrent_uploads));
    } else if (key == "max_upload_bytes_in_flight") {
      RETURN_IF_ERROR(Read(v, full, c.max_upload_bytes_in_flight));
    } else if (key == "upload_stall_timeout_ms") {
      RETURN_IF_ERROR(Read(v, full, c.upload_stall_timeout_ms));
    } else if (key == "drain_timeout_ms") {
      RETURN_IF_ERROR(Read(v, full, c.drain_timeout_ms));
    } else if (key == "memory_budget_bytes") {
      RETURN_IF_ERROR(Read(v, full, c.memory_budget_bytes));
    } else if (key == "max_build_memory_bytes") {
      RETURN_IF_ERROR(Read(v, full, c.max_build_memory_bytes));
    } else if (key == "auth_token") {
      RETURN_IF_ERROR(Read(v, full, c.auth_token));
    } else if (key == "tls") {
      RETURN_IF_ERROR(ApplyTlsSection(v, c.tls));
    } else if (key == "http_api") {
      RETURN_IF_ERROR(ApplyHttpApiSection(v, c.http_api));
    } else {
      return Bad(full, "unknown key");
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyLogSection(const YAML::Node& node, ServerConfig& c) {
  if (!node.IsMap()) return Bad("log", "expected a map");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (key == "level") {
      RETURN_IF_ERROR(Read(kv.second, "log.level", c.log_level));
    } else if (key == "json") {
      RETURN_IF_ERROR(Read(kv.second, "log.json", c.log_json));
    } else {
      return Bad("log." + key, "unknown key");
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyRoot(const YAML::Node& root, ServerConfig& c) {
  if (!root || root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) return absl::InvalidArgumentError("expected a YAML map at the top level");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (key == "server") {
      RETURN_IF_ERROR(ApplyServerSection(v, c));
    } else if (key == "model_repository") {
      RETURN_IF_ERROR(Read(v, key, c.model_repository));
    } else if (key == "engine_cache_dir") {
      RETURN_IF_ERROR(Read(v, key, c.engine_cache_dir));
    } else if (key == "log") {
      RETURN_IF_ERROR(ApplyLogSection(v, c));
    } else if (key == "model_defaults") {
      RETURN_IF_ERROR(ApplyModelConfig(v, c.model_defaults));
    } else {
      return Bad(key, "unknown key");
    }
  }
  return absl::OkStatus();
}

absl::Status Validate(const ServerConfig& c) {
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  bool level_ok = false;
  for (const char* l : kLevels) level_ok |= c.log_level == l;
  if (!level_ok) return Bad("log.level", "must be one of trace|debug|info|warn|error|critical|off");
  if (c.grpc_address.empty()) return Bad("server.grpc_address", "must not be empty");
  if (c.max_message_bytes < 1024) return Bad("server.max_message_bytes", "must be >= 1024");
  // gRPC takes the limit as an int, and protobuf cannot serialize a message of 2 GiB.
  if (c.max_message_bytes > (int64_t{1} << 30) + (int64_t{1} << 29)) {
    return Bad("server.max_message_bytes", "must be <= 1.5 GiB (1610612736)");
  }
  if (c.memory_budget_bytes != 0 && c.memory_budget_bytes < (int64_t{64} << 20)) {
    return Bad("server.memory_budget_bytes", "must be 0 (80 % of the machine) or >= 64 MiB");
  }
  if (c.max_build_memory_bytes < 0) return Bad("server.max_build_memory_bytes", "must be >= 0");
  if (c.max_model_bytes < 1) return Bad("server.max_model_bytes", "must be >= 1");
  if (c.max_concurrent_uploads < 1) return Bad("server.max_concurrent_uploads", "must be >= 1");
  if (c.max_upload_bytes_in_flight < c.max_model_bytes) {
    return Bad("server.max_upload_bytes_in_flight", "must be >= server.max_model_bytes");
  }
  if (c.upload_stall_timeout_ms < 1) return Bad("server.upload_stall_timeout_ms", "must be >= 1");
  if (c.drain_timeout_ms < 0) return Bad("server.drain_timeout_ms", "must be >= 0");
  if (c.model_repository.empty()) return Bad("model_repository", "must not be empty");
  const HttpApiConfig& h = c.http_api;
  if (h.max_body_bytes < 1024) return Bad("server.http_api.max_body_bytes", "must be >= 1024");
  if (h.body_timeout_ms < 1) return Bad("server.http_api.body_timeout_ms", "must be >= 1");
  if (h.body_idle_timeout_ms < 1) {
    return Bad("server.http_api.body_idle_timeout_ms", "must be >= 1");
  }
  if (h.max_buffered_bytes < h.max_body_bytes) {
    return Bad("server.http_api.max_buffered_bytes", "must be >= server.http_api.max_body_bytes");
  }
  if (h.threads < 1) return Bad("server.http_api.threads", "must be >= 1");
  if (h.generate_threads < 1 || h.generate_threads > 4096) {
    return Bad("server.http_api.generate_threads", "must be in 1..4096");
  }
  if (h.max_json_depth < 2 || h.max_json_depth > 1000) {
    return Bad("server.http_api.max_json_depth", "must be 2..1000");
  }
  if (c.tls.cert_file.empty() != c.tls.key_file.empty()) {
    return Bad("server.tls", "cert_file and key_file go together");
  }
  if (!c.tls.client_ca_file.empty() && !c.tls.enabled()) {
    return Bad("server.tls.client_ca_file", "needs cert_file and key_file");
  }
  ModelConfig check = c.model_defaults;  // validated on a copy: see ServerConfig
  absl::Status s = FinalizeModelConfig(check);
  if (!s.ok()) return Bad("model_defaults", std::string(s.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::optional<std::string> text = ReadWholeFile(path);
  if (!text) return absl::NotFoundError(absl::StrCat("cannot read config file '", path, "'"));
  return *std::move(text);
}

// Flags that take a value, mapped to the field they override.
using FlagSetter = void (*)(ServerConfig&, const std::string&);
const std::map<std::string, FlagSetter>& ValueFlags() {
  static const std::map<std::string, FlagSetter> flags = {
      {"--model-repository", [](ServerConfig& c, const std::string& v) { c.model_repository = v; }},
      {"--engine-cache-dir", [](ServerConfig& c, const std::string& v) { c.engine_cache_dir = v; }},
      {"--grpc-address", [](ServerConfig& c, const std::string& v) { c.grpc_address = v; }},
      {"--http-address", [](ServerConfig& c, const std::string& v) { c.http_address = v; }},
      {"--log-level", [](ServerConfig& c, const std::string& v) { c.log_level = v; }},
  };
  return flags;
}

// Splits args into (flag, value) pairs, accepting "--flag value" and "--flag=value".
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> SplitFlags(
    const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    const size_t eq = flag.find('=');
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (flag == "--log-json") {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag ", flag, " needs a value"));
    }
    if (flag != "--config" && flag != "--log-json" && !ValueFlags().count(flag)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", flag, "' (see --help)"));
    }
    out.emplace_back(flag, value);
  }
  return out;
}

}  // namespace

absl::StatusOr<ServerConfig> ParseServerConfig(const std::string& yaml, const std::string& where) {
  ServerConfig c;
  RETURN_IF_ERROR(ApplyYamlDocument(yaml, where, [&c](const YAML::Node& root) {
    RETURN_IF_ERROR(ApplyRoot(root, c));
    return Validate(c);
  }));
  return c;
}

absl::StatusOr<ServerConfig> LoadServerConfig(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(auto flags, SplitFlags(args));
  std::string yaml = EmbeddedDefaultConfig(), where = "embedded config/server.yaml";
  for (const auto& [flag, value] : flags) {
    if (flag != "--config") continue;
    ASSIGN_OR_RETURN(yaml, ReadFile(value));
    where = value;
  }
  ASSIGN_OR_RETURN(ServerConfig c, ParseServerConfig(yaml, where));
  for (const auto& [flag, value] : flags) {
    if (flag == "--log-json") {
      c.log_json = value == "true" || value == "1";
    } else if (flag != "--config") {
      ValueFlags().at(flag)(c, value);
    }
  }
  if (const char* token = std::getenv("KILN_AUTH_TOKEN")) c.auth_token = token;
  absl::Status s = Validate(c);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("command line: ", s.message()));
  return c;
}

std::string UsageText() {
  return "usage: kilnd [--config FILE] [--model-repository DIR] [--engine-cache-dir DIR]\n"
         "             [--grpc-address HOST:PORT] [--http-address HOST:PORT]\n"
         "             [--log-level LEVEL] [--log-json]\n"
         "Without --config, the embedded config/server.yaml is used; flags override it.\n";
}

}  // namespace kiln::server
