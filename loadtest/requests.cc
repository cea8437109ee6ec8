#include "loadtest/requests.h"

#include <cstring>
#include <map>
#include <random>
#include <thread>

#include <google/protobuf/util/json_util.h>

#include "base/file.h"
#include "absl/strings/str_cat.h"

namespace kiln::load {
namespace {

// How many distinct random requests to cycle through: enough that the server does not see
// one tensor over and over, few enough to build instantly.
constexpr int kRandomPoolSize = 8;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::optional<std::string> text = ReadWholeFile(path);
  if (!text) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return *std::move(text);
}

size_t ElementSize(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_BOOL: case v1::DATA_TYPE_UINT8: case v1::DATA_TYPE_INT8: return 1;
    case v1::DATA_TYPE_UINT16: case v1::DATA_TYPE_INT16: case v1::DATA_TYPE_FLOAT16:
    case v1::DATA_TYPE_BFLOAT16: return 2;
    case v1::DATA_TYPE_FLOAT: case v1::DATA_TYPE_INT32: case v1::DATA_TYPE_UINT32: return 4;
    case v1::DATA_TYPE_DOUBLE: case v1::DATA_TYPE_INT64: case v1::DATA_TYPE_UINT64:
    case v1::DATA_TYPE_COMPLEX64: return 8;
    case v1::DATA_TYPE_COMPLEX128: return 16;
    default: return 0;
  }
}

// Random elements as raw little-endian bytes (the server's fast path). Floats in [-1, 1] and
// integers in [0, 10) match the server's own warm-up ranges, so index-like inputs stay valid;
// half-precision types stay zero (any bit pattern would do, zero is always finite).
absl::Status FillRandom(const v1::TensorInfo& info, std::mt19937& rng, v1::Tensor* t) {
  const size_t elem = ElementSize(info.dtype());
  if (elem == 0) {
    return absl::UnimplementedError(absl::StrCat("input ", info.name(), ": dtype ",
                                                 v1::DataType_Name(info.dtype()), " not supported"));
  }
  t->set_dtype(info.dtype());
  int64_t numel = 1;
  for (int64_t d : info.shape()) {
    const int64_t dim = d < 0 ? 1 : d;  // -1 is the batch dim: one row
    t->add_shape(dim);
    numel *= dim;
  }
  std::string bytes(numel * elem, '\0');
  std::uniform_real_distribution<float> real(-1, 1);
  std::uniform_int_distribution<int> small(0, 9);
  for (int64_t i = 0; i < numel; ++i) {
    char* p = bytes.data() + i * elem;
    if (info.dtype() == v1::DATA_TYPE_FLOAT) {
      const float v = real(rng);
      std::memcpy(p, &v, 4);
    } else if (info.dtype() == v1::DATA_TYPE_DOUBLE) {
      const double v = real(rng);
      std::memcpy(p, &v, 8);
    } else if (info.dtype() == v1::DATA_TYPE_BOOL) {
      *p = static_cast<char>(small(rng) & 1);
    } else if (info.dtype() != v1::DATA_TYPE_FLOAT16 && info.dtype() != v1::DATA_TYPE_BFLOAT16) {
      *p = static_cast<char>(small(rng));  // little-endian: the low byte carries the value
    }
  }
  t->set_raw_data(std::move(bytes));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::PredictRequest>> RandomRequests(
    const Options& options, const std::shared_ptr<grpc::Channel>& channel) {
  auto info = GetReadyModel(options, channel);
  if (!info.ok()) return info.status();
  std::mt19937 rng(42);
  std::vector<v1::PredictRequest> out(kRandomPoolSize);
  for (v1::PredictRequest& req : out) {
    req.set_model(options.model);
    for (const v1::TensorInfo& input : info->inputs()) {
      absl::Status s = FillRandom(input, rng, &(*req.mutable_inputs())[input.name()]);
      if (!s.ok()) return s;
    }
  }
  return out;
}

// The file holds a PredictRequest, or a BatchPredictRequest (tried second: the JSON parser
// rejects unknown fields, so "samples" tells them apart).
absl::StatusOr<RequestPool> FromFile(const Options& options) {
  auto text = ReadFile(options.data_file);
  if (!text.ok()) return text.status();
  RequestPool pool;
  v1::PredictRequest predict;
  auto st = google::protobuf::util::JsonStringToMessage(*text, &predict);
  if (st.ok()) {
    pool.predict.push_back(std::move(predict));
    return pool;
  }
  v1::BatchPredictRequest batch;
  if (!google::protobuf::util::JsonStringToMessage(*text, &batch).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.data_file, ": not a PredictRequest in JSON: ", st.ToString()));
  }
  pool.batch.push_back(std::move(batch));
  return pool;
}

v1::BatchPredictRequest ToBatch(const v1::PredictRequest& p, int samples) {
  v1::BatchPredictRequest b;
  b.set_model(p.model());
  b.set_version(p.version());
  *b.mutable_output_filter() = p.output_filter();
  b.set_typed_outputs(p.typed_outputs());
  for (int i = 0; i < samples; ++i) *b.add_samples()->mutable_inputs() = p.inputs();
  return b;
}

// The v2 protocol's name for a kiln.v1 dtype ("" when it has none).
const char* V2Name(v1::DataType t) {
  switch (t) {
    case v1::DATA_TYPE_BOOL: return "BOOL";
    case v1::DATA_TYPE_UINT8: return "UINT8";
    case v1::DATA_TYPE_UINT16: return "UINT16";
    case v1::DATA_TYPE_UINT32: return "UINT32";
    case v1::DATA_TYPE_UINT64: return "UINT64";
    case v1::DATA_TYPE_INT8: return "INT8";
    case v1::DATA_TYPE_INT16: return "INT16";
    case v1::DATA_TYPE_INT32: return "INT32";
    case v1::DATA_TYPE_INT64: return "INT64";
    case v1::DATA_TYPE_FLOAT16: return "FP16";
    case v1::DATA_TYPE_BFLOAT16: return "BF16";
    case v1::DATA_TYPE_FLOAT: return "FP32";
    case v1::DATA_TYPE_DOUBLE: return "FP64";
    default: return "";
  }
}

template <class T, class Field>
std::string Pack(const Field& values) {
  std::string out(values.size() * sizeof(T), '\0');
  for (int i = 0; i < values.size(); ++i) {
    const T v = static_cast<T>(values.Get(i));
    std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
  }
  return out;
}

// The tensor's elements as raw little-endian bytes, whichever field carries them.
std::string RawBytes(const v1::Tensor& t) {
  if (!t.raw_data().empty()) return t.raw_data();
  switch (t.dtype()) {
    case v1::DATA_TYPE_FLOAT: return Pack<float>(t.float_data());
    case v1::DATA_TYPE_DOUBLE: return Pack<double>(t.double_data());
    case v1::DATA_TYPE_INT64: return Pack<int64_t>(t.int64_data());
    case v1::DATA_TYPE_INT32: return Pack<int32_t>(t.int32_data());
    case v1::DATA_TYPE_INT16: return Pack<int16_t>(t.int32_data());
    case v1::DATA_TYPE_INT8: return Pack<int8_t>(t.int32_data());
    case v1::DATA_TYPE_UINT16: return Pack<uint16_t>(t.int32_data());
    case v1::DATA_TYPE_UINT8: return Pack<uint8_t>(t.int32_data());
    case v1::DATA_TYPE_BOOL: return Pack<uint8_t>(t.bool_data());
    default: return "";
  }
}

}  // namespace

absl::StatusOr<v1::ModelInfo> GetReadyModel(const Options& options,
                                       const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::ModelService::NewStub(channel);
  const auto give_up = std::chrono::steady_clock::now() + options.wait_ready;
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + options.timeout);
    v1::GetModelRequest req;
    req.set_name(options.model);
    v1::ModelInfo info;
    const grpc::Status s = stub->GetModel(&ctx, req, &info);
    if (s.ok() && info.state() == v1::MODEL_STATE_READY) return info;
    if (std::chrono::steady_clock::now() >= give_up) {
      return absl::UnavailableError(absl::StrCat(
          "GetModel ", options.model, ": ",
          s.ok() ? v1::ModelState_Name(info.state()) + " " + info.reason() : s.error_message()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}


absl::StatusOr<inference::ModelInferRequest> ToModelInfer(const v1::PredictRequest& p) {
  inference::ModelInferRequest r;
  r.set_model_name(p.model());
  if (p.version() != 0) r.set_model_version(std::to_string(p.version()));
  // Sorted by name: a map's order is unspecified, and the pool should not depend on it.
  std::map<std::string, const v1::Tensor*> inputs;
  for (const auto& [name, t] : p.inputs()) inputs[name] = &t;
  for (const auto& [name, t] : inputs) {
    if (V2Name(t->dtype())[0] == '\0') {
      return absl::InvalidArgumentError(absl::StrCat("input ", name, ": dtype ",
                                                     v1::DataType_Name(t->dtype()),
                                                     " has no KServe v2 datatype"));
    }
    auto* in = r.add_inputs();
    in->set_name(name);
    in->set_datatype(V2Name(t->dtype()));
    for (int64_t d : t->shape()) in->add_shape(d);
    r.add_raw_input_contents(RawBytes(*t));
  }
  for (const std::string& o : p.output_filter()) r.add_outputs()->set_name(o);
  return r;
}

absl::StatusOr<RequestPool> BuildRequests(const Options& options,
                                          const std::shared_ptr<grpc::Channel>& channel) {
  RequestPool pool;
  if (!options.data_file.empty()) {
    auto from_file = FromFile(options);
    if (!from_file.ok()) return from_file.status();
    pool = std::move(*from_file);
  } else {
    auto random = RandomRequests(options, channel);
    if (!random.ok()) return random.status();
    pool.predict = std::move(*random);
  }
  if (!options.model.empty()) {
    for (auto& r : pool.predict) r.set_model(options.model);
    for (auto& r : pool.batch) r.set_model(options.model);
  }
  if (options.call == "batch_predict" && pool.batch.empty()) {
    for (const auto& p : pool.predict) pool.batch.push_back(ToBatch(p, options.samples));
  }
  if (options.call == "predict" && pool.predict.empty()) {
    return absl::InvalidArgumentError("--call predict needs a PredictRequest, the file holds a BatchPredictRequest");
  }
  if (options.protocol == "v2") {
    for (const auto& p : pool.predict) {
      auto r = ToModelInfer(p);
      if (!r.ok()) return r.status();
      pool.v2.push_back(std::move(*r));
    }
  }
  return pool;
}

}  // namespace kiln::load
