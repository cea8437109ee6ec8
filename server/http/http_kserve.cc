#include "server/http/http_kserve.h"

#include <google/protobuf/message.h>

#include <charconv>
#include <memory>

#include "base/json.h"
#include "server/common/auth.h"
#include "server/common/echo.h"
#include "server/http/http.h"
#include "server/http/json_message.h"
#include "server/serving/kserve_model.h"
#include "server/serving/readiness.h"

namespace kiln::server {
namespace {

using google::protobuf::Message;

constexpr char kJson[] = "application/json";

// Status messages are cut as gRPC's are (ToGrpcStatus): a 10 KB client-chosen name should not
// come back as a 10 KB error.
constexpr size_t kMaxErrorBytes = 2048;

void SendMessage(httplib::Response& res, const Message& m) {
  json::Writer w;
  WriteMessageJson(m, w);
  res.set_content(w.Take(), kJson);
}

template <class T>
void SendOrFail(httplib::Response& res, const absl::StatusOr<T>& r) {
  if (r.ok()) {
    SendMessage(res, *r);
  } else {
    SendError(res, r.status());
  }
}

// --- Inference requests.

std::string Matched(const httplib::Request& req, size_t i) {
  return i < req.matches.size() ? req.matches[i].str() : std::string();
}

absl::StatusOr<std::string> StringMember(const json::Value& obj, const std::string& key,
                                         const std::string& what, bool required) {
  const json::Value* v = obj.Find(key);
  if (v == nullptr) {
    if (!required) return std::string();
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", key, "' is missing"));
  }
  if (v->kind() != json::Kind::kString) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", key, "' must be a string"));
  }
  return v->text();
}

// A member that must be a JSON object when present (parameters); null when absent.
absl::StatusOr<const json::Value*> ObjectMember(const json::Value& obj, const std::string& key,
                                                const std::string& what) {
  const json::Value* v = obj.Find(key);
  if (v != nullptr && !v->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", key, "' must be an object"));
  }
  return v;
}

const std::vector<std::pair<std::string, json::Value>>& Members(const json::Value* v) {
  static const auto* none = new std::vector<std::pair<std::string, json::Value>>();
  return v ? v->members() : *none;
}

absl::StatusOr<bool> BoolValue(const json::Value& v, const std::string& what) {
  if (v.kind() != json::Kind::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be true or false"));
  }
  return v.boolean();
}

absl::StatusOr<std::vector<int64_t>> ShapeOf(const json::Value& in, const std::string& what) {
  const json::Value* shape = in.Find("shape");
  if (shape == nullptr || !shape->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": 'shape' must be an array"));
  }
  std::vector<int64_t> dims;
  for (const json::Value& d : shape->items()) {
    ASSIGN_OR_RETURN(const int64_t v, json::AsInt64(d, absl::StrCat(what, ": shape")));
    dims.push_back(v);
  }
  return dims;
}

// The binary tensor extension: an input whose parameters carry binary_data_size takes that
// many bytes of the body after the JSON, in input order.
absl::StatusOr<Tensor> DecodeInput(const json::Value& in, const std::string& name,
                                   const ModelSignature& sig,
                                   const std::shared_ptr<std::string>& body, size_t& offset) {
  const std::string what = absl::StrCat("input '", EchoName(name), "'");
  ASSIGN_OR_RETURN(const std::string datatype, StringMember(in, "datatype", what, true));
  ASSIGN_OR_RETURN(const DType dtype, kserve::ParseDataType(datatype, what));
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, ShapeOf(in, what));
  RETURN_IF_ERROR(CheckDeclaredInput(sig, name, dtype, shape));
  ASSIGN_OR_RETURN(const json::Value* params, ObjectMember(in, "parameters", what));
  std::optional<uint64_t> binary;
  for (const auto& [key, value] : Members(params)) {
    if (key == "binary_data_size") {
      ASSIGN_OR_RETURN(binary, json::AsUInt64(value, absl::StrCat(what, ": binary_data_size")));
    } else {
      RETURN_IF_ERROR(kserve::CheckParameter(key, what));
    }
  }
  const json::Value* data = in.Find("data");
  if (!binary) {
    if (data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": no 'data' and no binary_data_size parameter"));
    }
    return kserve::FromJsonData(dtype, std::move(shape), *data, what);
  }
  if (data != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": both 'data' and binary_data_size"));
  }
  const size_t left = body->size() - offset;
  if (*binary > left) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": binary_data_size ", *binary,
                                                   " exceeds the ", left,
                                                   " bytes of binary data left in the body"));
  }
  const std::string_view bytes = std::string_view(*body).substr(offset, *binary);
  offset += *binary;
  return kserve::FromRawBytes(dtype, std::move(shape), body, bytes, what);
}

absl::StatusOr<std::vector<NamedTensor>> DecodeInputs(const json::Value& inputs,
                                                      const ModelSignature& sig,
                                                      const std::shared_ptr<std::string>& body,
                                                      size_t json_bytes) {
  std::vector<NamedTensor> out;
  size_t offset = json_bytes;
  for (size_t i = 0; i < inputs.items().size(); ++i) {
    const json::Value& in = inputs.items()[i];
    if (!in.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "] must be an object"));
    }
    ASSIGN_OR_RETURN(std::string name,
                     StringMember(in, "name", absl::StrCat("inputs[", i, "]"), true));
    ASSIGN_OR_RETURN(Tensor t, DecodeInput(in, name, sig, body, offset));
    out.push_back({std::move(name), std::move(t)});
  }
  if (offset != body->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(body->size() - offset,
                     " bytes of binary data after what the inputs' binary_data_size "
                     "parameters take"));
  }
  return out;
}

absl::StatusOr<kserve::RequestedOutput> OutputOf(const json::Value& o, size_t i) {
  if (!o.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("outputs[", i, "] must be an object"));
  }
  kserve::RequestedOutput r;
  ASSIGN_OR_RETURN(r.name, StringMember(o, "name", absl::StrCat("outputs[", i, "]"), true));
  const std::string what = absl::StrCat("output '", EchoName(r.name), "'");
  ASSIGN_OR_RETURN(const json::Value* params, ObjectMember(o, "parameters", what));
  for (const auto& [key, value] : Members(params)) {
    if (key == "binary_data") {
      ASSIGN_OR_RETURN(r.binary, BoolValue(value, absl::StrCat(what, ": binary_data")));
    } else if (key == "classification") {
      ASSIGN_OR_RETURN(r.classification,
                       json::AsInt64(value, absl::StrCat(what, ": classification")));
    } else {
      RETURN_IF_ERROR(kserve::CheckParameter(key, what));
    }
  }
  return r;
}

// Everything but the inputs is read here; they are decoded once the model is found.
absl::StatusOr<kserve::InferCall> ParseInfer(std::string model, std::string version,
                                             std::shared_ptr<std::string> body, size_t json_bytes,
                                             const json::Limits& limits) {
  auto doc = std::make_shared<json::Value>();
  ASSIGN_OR_RETURN(*doc, json::Parse(std::string_view(*body).substr(0, json_bytes), limits));
  if (!doc->is_object()) return absl::InvalidArgumentError("the request must be a JSON object");
  kserve::InferCall call;
  call.model = std::move(model);
  call.version = std::move(version);
  ASSIGN_OR_RETURN(call.id, StringMember(*doc, "id", "request", false));
  ASSIGN_OR_RETURN(const json::Value* params, ObjectMember(*doc, "parameters", "request"));
  for (const auto& [key, value] : Members(params)) {
    if (key == "binary_data_output") {
      ASSIGN_OR_RETURN(call.binary_outputs, BoolValue(value, "binary_data_output"));
    } else {
      RETURN_IF_ERROR(kserve::CheckParameter(key, "request"));
    }
  }
  if (const json::Value* outputs = doc->Find("outputs")) {
    if (!outputs->is_array()) return absl::InvalidArgumentError("'outputs' must be an array");
    for (size_t i = 0; i < outputs->items().size(); ++i) {
      ASSIGN_OR_RETURN(kserve::RequestedOutput o, OutputOf(outputs->items()[i], i));
      call.outputs.push_back(std::move(o));
    }
  }
  const json::Value* inputs = doc->Find("inputs");
  if (inputs == nullptr || !inputs->is_array()) {
    return absl::InvalidArgumentError("'inputs' must be an array");
  }
  call.decode = [doc, inputs, body, json_bytes](const ModelSignature& sig) {
    return DecodeInputs(*inputs, sig, body, json_bytes);
  };
  return call;
}

// The JSON header's length: the Inference-Header-Content-Length header, else the whole body.
absl::StatusOr<size_t> JsonBytes(const httplib::Request& req, size_t body_bytes) {
  if (!req.has_header("Inference-Header-Content-Length")) return body_bytes;
  // Two values would be read differently by different readers (cpp-httplib takes the first).
  if (req.get_header_value_count("Inference-Header-Content-Length") > 1) {
    return absl::InvalidArgumentError("Inference-Header-Content-Length is given more than once");
  }
  const std::string v = req.get_header_value("Inference-Header-Content-Length");
  size_t n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || ptr != v.data() + v.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Inference-Header-Content-Length '", EchoName(v), "' is not a byte count"));
  }
  if (n > body_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("Inference-Header-Content-Length ", n,
                                                   " exceeds the body's ", body_bytes, " bytes"));
  }
  return n;
}

void SendReply(const kserve::InferReply& r, httplib::Response& res) {
  json::Writer w;
  std::string binary;
  bool any_binary = false;
  w.BeginObject().Key("model_name").String(r.model).Key("model_version").String(r.version);
  if (!r.id.empty()) w.Key("id").String(r.id);
  w.Key("outputs").BeginArray();
  for (const kserve::Output& o : r.outputs) {
    w.BeginObject().Key("name").String(o.name).Key("datatype").String(o.datatype);
    w.Key("shape").BeginArray();
    for (int64_t d : o.shape) w.Int(d);
    w.EndArray();
    if (o.binary) {
      any_binary = true;
      w.Key("parameters").BeginObject().Key("binary_data_size").UInt(kserve::RawByteSize(o));
      w.EndObject();
      kserve::AppendRawBytes(o, &binary);
    } else {
      w.Key("data");
      kserve::WriteJsonData(o, w);
    }
    w.EndObject();
  }
  w.EndArray().EndObject();
  if (!any_binary) {
    res.set_content(w.Take(), kJson);
    return;
  }
  std::string body = w.Take();
  res.set_header("Inference-Header-Content-Length", std::to_string(body.size()));
  body += binary;
  res.set_content(std::move(body), "application/octet-stream");
}

void Infer(ModelRegistry& registry, const json::Limits& limits, const httplib::Request& req,
           httplib::Response& res) {
  RequestRecorder record(registry, "RESTInfer");
  const std::string model = Matched(req, 1);
  auto run = [&]() -> absl::Status {
    // The request is this handler's own and read by nothing after it: its body moves into
    // the tensors' owner instead of being copied (the binary extension's tensors view it).
    auto body = std::make_shared<std::string>(std::move(const_cast<std::string&>(req.body)));
    ASSIGN_OR_RETURN(const size_t json_bytes, JsonBytes(req, body->size()));
    ASSIGN_OR_RETURN(kserve::InferCall call,
                     ParseInfer(model, Matched(req, 2), body, json_bytes, limits));
    ASSIGN_OR_RETURN(auto pending,
                     kserve::StartInfer(registry, std::move(call), std::nullopt, record));
    ASSIGN_OR_RETURN(const kserve::InferReply reply, kserve::FinishInfer(pending));
    SendReply(reply, res);
    return absl::OkStatus();
  };
  const absl::Status s = record.Finish(model, run());
  if (!s.ok()) SendError(res, s);
}

// --- Health, metadata, repository.

void ModelReadyRoute(const ModelRegistry& registry, const httplib::Request& req,
                     httplib::Response& res) {
  auto version = ParseVersion(Matched(req, 2));
  if (!version.ok()) return SendError(res, version.status());
  auto ready = FindReady(registry, Matched(req, 1), *version);
  if (!ready.ok()) return SendError(res, ready.status());
  res.status = 200;
}

absl::StatusOr<bool> ReadyOnly(const httplib::Request& req, const json::Limits& limits) {
  if (req.body.empty()) return false;
  ASSIGN_OR_RETURN(const json::Value doc, json::Parse(req.body, limits));
  if (!doc.is_object()) return absl::InvalidArgumentError("the request must be a JSON object");
  const json::Value* ready = doc.Find("ready");
  if (ready == nullptr) return false;
  return BoolValue(*ready, "'ready'");
}

void IndexRoute(ModelRegistry& registry, const json::Limits& limits, const httplib::Request& req,
                httplib::Response& res) {
  auto ready_only = ReadyOnly(req, limits);
  if (!ready_only.ok()) return SendError(res, ready_only.status());
  const inference::RepositoryIndexResponse index =
      kserve::GetRepositoryIndex(registry, *ready_only);
  json::Writer w;
  w.BeginArray();
  for (const auto& m : index.models()) WriteMessageJson(m, w);
  w.EndArray();
  res.set_content(w.Take(), kJson);
}

absl::Status Authorize(const httplib::Request& req, const std::string& token) {
  if (!req.has_header("Authorization")) return CheckBearer(token, std::nullopt);
  return CheckBearer(token, req.get_header_value("Authorization"));
}

// Load and unload: POST with an optional {"parameters": {...}} body.
absl::Status RepositoryChange(ModelRegistry& registry, const HttpOptions& options,
                              const httplib::Request& req, bool load) {
  RETURN_IF_ERROR(Authorize(req, options.auth_token));
  const std::string name = Matched(req, 1);
  if (!req.body.empty()) {
    ASSIGN_OR_RETURN(const json::Value doc, json::Parse(req.body, {options.max_json_depth}));
    if (!doc.is_object()) return absl::InvalidArgumentError("the request must be a JSON object");
    ASSIGN_OR_RETURN(const json::Value* params, ObjectMember(doc, "parameters", "request"));
    for (const auto& [key, value] : Members(params)) {
      if (load && (key == "config" || key.rfind("file:", 0) == 0)) {
        return absl::UnimplementedError(
            absl::StrCat("parameter '", EchoName(key),
                         "': kilnd loads models from its repository only; "
                         "send a model with kiln.v1.ModelService/LoadModel"));
      }
    }
  }
  if (load) return registry.LoadFromRepository(name);
  RETURN_IF_ERROR(ValidateModelName(name));
  return registry.Unload(name, std::nullopt, /*delete_files=*/false);
}

}  // namespace

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

namespace {

// /v2/models/NAME and /v2/models/NAME/versions/V: match 1 is the name, 2 the version.
constexpr char kModelPath[] = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";

// GET: health, server and model metadata, configuration, statistics.
void AddReadRoutes(httplib::Server& router, const ModelRegistry& registry) {
  const std::string model = kModelPath;
  router.Get("/v2", [](const httplib::Request&, httplib::Response& res) {
    SendMessage(res, kserve::GetServerMetadata());
  });
  router.Get("/v2/health/live",
             [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  router.Get("/v2/health/ready", [&registry](const httplib::Request&, httplib::Response& res) {
    const Readiness r = CheckReadiness(registry);
    if (!r.ready) return SendError(res, absl::UnavailableError(r.body));
    res.status = 200;
  });
  // Before the model routes: "stats" would otherwise be read as a model name.
  router.Get("/v2/models/stats", [&registry](const httplib::Request&, httplib::Response& res) {
    SendOrFail(res, kserve::GetModelStatistics(registry, "", ""));
  });
  router.Get(model + "/stats", [&registry](const httplib::Request& req, httplib::Response& res) {
    SendOrFail(res, kserve::GetModelStatistics(registry, Matched(req, 1), Matched(req, 2)));
  });
  router.Get(model + "/ready", [&registry](const httplib::Request& req, httplib::Response& res) {
    ModelReadyRoute(registry, req, res);
  });
  router.Get(model + "/config", [&registry](const httplib::Request& req, httplib::Response& res) {
    SendOrFail(res, kserve::GetModelConfig(registry, Matched(req, 1), Matched(req, 2)));
  });
  router.Get(model, [&registry](const httplib::Request& req, httplib::Response& res) {
    SendOrFail(res, kserve::GetModelMetadata(registry, Matched(req, 1), Matched(req, 2)));
  });
}

// POST: inference and the repository.
void AddWriteRoutes(httplib::Server& router, ModelRegistry& registry, const HttpOptions& options) {
  const json::Limits limits{options.max_json_depth};
  router.Post(std::string(kModelPath) + "/infer",
              [&registry, limits](const httplib::Request& req, httplib::Response& res) {
                Infer(registry, limits, req, res);
              });
  router.Post("/v2/repository/index",
              [&registry, limits](const httplib::Request& req, httplib::Response& res) {
                IndexRoute(registry, limits, req, res);
              });
  for (const bool load : {true, false}) {
    router.Post(std::string(R"(/v2/repository/models/([^/]+)/)") + (load ? "load" : "unload"),
                [&registry, options, load](const httplib::Request& req, httplib::Response& res) {
                  const absl::Status s = RepositoryChange(registry, options, req, load);
                  if (!s.ok()) return SendError(res, s);
                  res.status = 200;
                });
  }
}

}  // namespace

std::string ErrorBody(const absl::Status& s) {
  std::string message(s.message().substr(0, kMaxErrorBytes));
  if (s.message().size() > kMaxErrorBytes) message += "...";
  json::Writer w;
  return w.BeginObject().Key("error").String(message).EndObject().Take();
}

void SendError(httplib::Response& res, const absl::Status& s) {
  res.status = HttpStatusFor(s.code());
  if (s.code() == absl::StatusCode::kUnauthenticated) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(ErrorBody(s), kJson);
}

void AddKServeRoutes(httplib::Server& router, ModelRegistry& registry, const HttpOptions& options) {
  AddReadRoutes(router, registry);
  AddWriteRoutes(router, registry, options);
  // Anything else under /v2 gets the protocol's error body rather than an empty 404.
  auto unknown = [](const httplib::Request& req, httplib::Response& res) {
    SendError(res, absl::NotFoundError(
                       absl::StrCat("no such endpoint: ", req.method, " ", EchoName(req.path))));
  };
  router.Get(R"(/v2/.*)", unknown);
  router.Post(R"(/v2/.*)", unknown);
}

}  // namespace kiln::server
