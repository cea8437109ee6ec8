// libFuzzer target: Predict and BatchPredict request decoding and validation
// (server/serving/request_validation.h, server/serving/tensor_codec.h), everything a request meets
// before it is queued. The first byte picks the message (PredictRequest or BatchPredictRequest) and
// one of three signatures; the rest is the serialized request. Built by run_fuzz.sh
// (--target predict) with clang++ -fsanitize=fuzzer,address,undefined.
//
// Properties: validation never crashes and fails only with INVALID_ARGUMENT and a bounded
// message; what it accepts matches the signature exactly (one tensor per input, dtype, shape,
// byte count, one batch size within max_batch_size) and survives an encode/decode round trip;
// the response bound of what it accepts is exact (rows times each selected output's row
// bytes, summed over a BatchPredict's samples, never wrapping) or absent where an output's
// size is known only after the run, and the message limit refuses exactly what passes it.
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kiln/v1/inference.pb.h"
#include "server/serving/request_validation.h"
#include "server/serving/tensor_codec.h"

namespace {

using kiln::DType;
using kiln::server::ModelSignature;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_predict: %s\n", what.c_str());
  std::abort();
}

const ModelSignature& Signature(int which) {
  static const std::array<ModelSignature, 3> sigs = [] {
    ModelSignature image;  // batchable, one float input
    image.inputs = {{"x", DType::kFloat32, {-1, 3, 4}}};
    image.outputs = {{"y", DType::kFloat32, {-1, 2}}};
    image.batchable = true;
    image.max_batch_size = 8;
    ModelSignature text = image;  // two inputs sharing the batch, integer and bool
    text.inputs = {{"ids", DType::kInt64, {-1, 5}}, {"mask", DType::kBool, {-1, 5}}};
    text.outputs = {{"logits", DType::kFloat32, {-1, 2}}, {"pooled", DType::kFloat64, {-1}}};
    ModelSignature fixed;  // not batchable: a fixed shape, narrow integer types
    fixed.inputs = {
        {"a", DType::kInt8, {2, 2}}, {"b", DType::kUInt16, {}}, {"c", DType::kInt32, {1}}};
    fixed.outputs = {{"o", DType::kFloat32, {2}}, {"n", DType::kInt64, {-1}}};  // data-dependent
    fixed.batchable = false;
    fixed.max_batch_size = 1;
    return std::array<ModelSignature, 3>{image, text, fixed};
  }();
  return sigs[which];
}

void CheckError(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kInvalidArgument) Fail("not INVALID_ARGUMENT: " + s.ToString());
  if (s.message().size() > 1024)
    Fail("an unbounded message: " + std::string(s.message().substr(0, 200)));
}

void CheckAccepted(const ModelSignature& sig, const kiln::server::ValidatedInputs& in) {
  if (in.tensors.size() != sig.inputs.size()) Fail("not one tensor per input");
  if (in.rows < 1 || in.rows > sig.max_batch_size) Fail("rows outside 1..max_batch_size");
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    const kiln::Tensor& t = in.tensors[i];
    const auto& spec = sig.inputs[i];
    if (t.dtype() != spec.dtype || t.rank() != static_cast<int64_t>(spec.shape.size()))
      Fail("dtype or rank");
    for (size_t d = 0; d < spec.shape.size(); ++d) {
      const int64_t want = spec.shape[d] < 0 ? in.rows : spec.shape[d];
      if (t.dim(d) != want) Fail("a dim differs from the signature");
    }
    kiln::v1::Tensor wire;
    kiln::server::EncodeTensor(t, /*typed=*/false, &wire);
    auto back = kiln::server::DecodeTensor(wire, "round trip");
    if (!back.ok() || back->nbytes() != t.nbytes() ||
        (t.nbytes() && std::memcmp(back->raw(), t.raw(), t.nbytes()) != 0)) {
      Fail("an accepted tensor does not survive encode/decode");
    }
  }
}

// The bound for `rows` rows against a plain recount, and the limit on both sides of it.
void CheckResponseBound(const ModelSignature& sig, const std::vector<size_t>& selected,
                        int64_t rows) {
  const auto bound = kiln::server::ResponseBytesBound(sig, selected, rows);
  __int128 want = 0;
  bool known = true;
  for (size_t i : selected) {
    __int128 bytes = static_cast<__int128>(kiln::DTypeSize(sig.outputs[i].dtype));
    for (size_t d = 0; d < sig.outputs[i].shape.size(); ++d) {
      const int64_t n = sig.outputs[i].shape[d];
      if (d == 0 && sig.batchable) {
        bytes *= rows;
      } else if (n < 0) {
        known = false;
      } else {
        bytes *= n;
      }
    }
    want += bytes;
  }
  if (known != bound.has_value()) Fail("a response bound where none can be known, or none");
  if (!bound) return;
  if (*bound < 0 || static_cast<__int128>(*bound) != want) Fail("a wrong response bound");
  if (!kiln::server::CheckResponseBytes(*bound, *bound).ok()) Fail("the limit refused its size");
  const absl::Status over = kiln::server::CheckResponseBytes(*bound, *bound - 1);
  if (over.code() != absl::StatusCode::kResourceExhausted) Fail("past the limit, not refused");
}

template <class Filter>
int64_t Validate(const ModelSignature& sig, kiln::server::ProtoTensorMap* inputs,
                 const Filter& filter) {
  auto selected = kiln::server::SelectOutputs(sig, filter);
  if (!selected.ok()) CheckError(selected.status());
  auto in = kiln::server::ValidateInputs(sig, inputs);
  if (!in.ok()) {
    CheckError(in.status());
    return 0;
  }
  CheckAccepted(sig, *in);
  if (selected.ok()) CheckResponseBound(sig, *selected, in->rows);
  return in->rows;
}

}  // namespace

// Hostile bytes in string fields are expected; protobuf's log line for each is noise.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const ModelSignature& sig = Signature(data[0] % 3);
  const bool batch = (data[0] / 3) % 2 == 1;
  if (!batch) {
    kiln::v1::PredictRequest req;
    if (!req.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
    Validate(sig, req.mutable_inputs(), req.output_filter());
    return 0;
  }
  kiln::v1::BatchPredictRequest req;
  if (!req.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  int64_t rows = 0;
  for (auto& sample : *req.mutable_samples())
    rows += Validate(sig, sample.mutable_inputs(), req.output_filter());
  // The samples answer in one message: the bound of their sum, as BatchPredict checks it.
  auto selected = kiln::server::SelectOutputs(sig, req.output_filter());
  if (selected.ok() && rows > 0) CheckResponseBound(sig, *selected, rows);
  return 0;
}
