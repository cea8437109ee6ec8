// Request validation and the tensor codec: every client mistake gets a precise message.
#include <gtest/gtest.h>

#include <cstring>

#include "server/serving/request_validation.h"
#include "server/serving/tensor_codec.h"

namespace kiln::server {
namespace {

ModelSignature Sig() {
  ModelSignature s;
  s.inputs = {{"x", DType::kFloat32, {-1, 3}}, {"ids", DType::kInt64, {-1}}};
  s.outputs = {{"y", DType::kFloat32, {-1, 2}}, {"z", DType::kFloat32, {-1}}};
  s.batchable = true;
  s.max_batch_size = 4;
  return s;
}

v1::Tensor Floats(std::vector<int64_t> shape, int n) {
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_FLOAT);
  for (int64_t d : shape) t.add_shape(d);
  for (int i = 0; i < n; ++i) t.add_float_data(float(i));
  return t;
}

v1::Tensor Ids(int n) {
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_INT64);
  t.add_shape(n);
  std::string raw(n * 8, '\0');
  t.set_raw_data(raw);
  return t;
}

std::string Message(ProtoTensorMap m) {
  auto r = ValidateInputs(Sig(), &m);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(r.status().message());
}

TEST(ValidateInputs, AcceptsRawAndTypedForms) {
  ProtoTensorMap m;
  m["x"] = Floats({2, 3}, 6);
  m["ids"] = Ids(2);
  const void* id_bytes = m["ids"].raw_data().data();
  auto r = ValidateInputs(Sig(), &m);
  ASSERT_TRUE(r.ok()) << r.status();
  // raw_data moved into the tensor, not copied; the typed input was converted.
  EXPECT_EQ(r->tensors[1].raw(), id_bytes);
  EXPECT_TRUE(m["ids"].raw_data().empty());
  EXPECT_EQ(r->rows, 2);
  ASSERT_EQ(r->tensors.size(), 2u);
  EXPECT_EQ(r->tensors[0].ToDoubleVector(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(r->tensors[1].dtype(), DType::kInt64);
}

TEST(ValidateInputs, PreciseMessages) {
  ProtoTensorMap m;
  m["x"] = Floats({2, 3}, 6);
  EXPECT_EQ(Message(m), "missing input 'ids' (INT64[batch])");
  m["ids"] = Ids(2);
  m["extra"] = Ids(1);
  EXPECT_EQ(Message(m), "unknown input 'extra'; the model takes: x, ids");
  m.erase("extra");
  m["x"] = Floats({2, 4}, 8);
  EXPECT_EQ(Message(m), "input 'x': shape [2,4], the model takes FLOAT[batch,3]");
  m["x"] = Floats({2, 3}, 5);
  EXPECT_EQ(Message(m), "input 'x': float_data has 5 elements, shape [2,3] needs 6");
  m["x"] = Floats({5, 3}, 15);
  m["ids"] = Ids(5);
  EXPECT_EQ(Message(m), "input 'x': batch of 5 exceeds max_batch_size 4");
  m["x"] = Floats({1, 3}, 3);
  m["ids"] = Ids(2);
  EXPECT_EQ(Message(m), "input 'ids': batch dim 2 differs from the other inputs' 1");
  m["ids"] = Floats({1}, 1);
  EXPECT_EQ(Message(m), "input 'ids': dtype FLOAT, the model takes INT64[batch]");
}

TEST(DecodeTensor, AHugeShapeWithoutBytesIsRejectedBeforeAnyAllocation) {
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_FLOAT);
  t.add_shape(int64_t{1} << 39);  // 2 TiB of floats if it were believed
  EXPECT_EQ(DecodeTensor(t, "t").status().message(),
            "t: raw_data has 0 bytes, FLOAT[549755813888] needs 2199023255552");
  EXPECT_FALSE(TakeTensor(&t, "t").ok());
  // A shape past 2^40 elements is refused as such.
  t.add_shape(4);
  EXPECT_EQ(DecodeTensor(t, "t").status().message(), "t: shape too large");
}

TEST(DecodeTensor, TakeMovesAlignedBytesAndCopiesOtherwise) {
  v1::Tensor t;
  t.set_dtype(v1::DATA_TYPE_FLOAT);
  t.add_shape(64);
  std::string bytes(256, '\0');
  for (int i = 0; i < 64; ++i) reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(i);
  t.set_raw_data(bytes);
  const v1::Tensor copy = t;
  const void* where = t.raw_data().data();
  auto taken = TakeTensor(&t, "t");
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(taken->raw(), where);
  EXPECT_EQ(taken->GetDouble(63), 63.0);
  // Decode leaves its source alone.
  auto decoded = DecodeTensor(copy, "t");
  ASSERT_TRUE(decoded.ok());
  EXPECT_NE(decoded->raw(), copy.raw_data().data());
  EXPECT_EQ(copy.raw_data().size(), 256u);
  EXPECT_EQ(decoded->ToDoubleVector(), taken->ToDoubleVector());
}

TEST(DecodeTensor, RejectsMismatchedData) {
  v1::Tensor t = Floats({2}, 0);
  t.set_raw_data(std::string(7, '\0'));
  EXPECT_EQ(DecodeTensor(t, "t").status().message(), "t: raw_data has 7 bytes, FLOAT[2] needs 8");
  t = Floats({1}, 1);
  t.set_raw_data(std::string(4, '\0'));
  EXPECT_EQ(DecodeTensor(t, "t").status().message(), "t: both raw_data and float_data are set");
  t = Floats({1}, 0);
  t.add_int64_data(1);
  EXPECT_EQ(DecodeTensor(t, "t").status().message(),
            "t: int64_data does not match dtype FLOAT (use float_data)");
  t = Floats({-1}, 0);
  EXPECT_EQ(DecodeTensor(t, "t").status().message(), "t: negative dim -1");
  t = Floats({1}, 1);
  t.set_dtype(v1::DATA_TYPE_STRING);
  EXPECT_NE(DecodeTensor(t, "t").status().message().find("unsupported dtype STRING"),
            std::string::npos);
}

TEST(TensorCodec, RoundTripsRawAndTyped) {
  Tensor x = Tensor::FromFloat({1.5f, -2.0f, 3.25f}, {3});
  for (bool typed : {false, true}) {
    v1::Tensor p;
    EncodeTensor(x, typed, &p);
    EXPECT_EQ(typed, p.float_data_size() == 3);
    auto back = DecodeTensor(p, "x");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->ToDoubleVector(), x.ToDoubleVector());
    EXPECT_EQ(back->shape(), x.shape());
  }
  Tensor b(DType::kBool, {2});
  b.SetInt(1, 1);
  v1::Tensor p;
  EncodeTensor(b, true, &p);
  ASSERT_EQ(p.bool_data_size(), 2);
  EXPECT_TRUE(p.bool_data(1));
}

// A status message rides in a response header: a client's 10 KB name quoted whole would push
// it past the client's 8 KB metadata limit and turn the answer into RESOURCE_EXHAUSTED.
TEST(ValidateInputs, LongClientNamesAreQuotedCutShort) {
  ProtoTensorMap m;
  m["x"] = Floats({1, 3}, 3);
  m["ids"] = Ids(1);
  m[std::string(10000, 'q') + "\n"] = Ids(1);
  const std::string msg = Message(m);
  EXPECT_EQ(msg, "unknown input '" + std::string(64, 'q') +
                     "...(10001 bytes)'; the model takes: x, ids");
  google::protobuf::RepeatedPtrField<std::string> f;
  *f.Add() = std::string(10000, 'w');
  EXPECT_LT(SelectOutputs(Sig(), f).status().message().size(), 200u);
}

TEST(SelectOutputs, FilterByName) {
  google::protobuf::RepeatedPtrField<std::string> f;
  EXPECT_EQ(*SelectOutputs(Sig(), f), (std::vector<size_t>{0, 1}));
  *f.Add() = "z";
  EXPECT_EQ(*SelectOutputs(Sig(), f), (std::vector<size_t>{1}));
  *f.Add() = "w";
  EXPECT_EQ(SelectOutputs(Sig(), f).status().message(),
            "unknown output 'w' in output_filter; the model has: y, z");
}

// As KServe v2 refuses a requested output named twice, so does kiln.v1's output_filter.
TEST(SelectOutputs, AnOutputNamedTwiceIsRefusedOnBothProtocols) {
  google::protobuf::RepeatedPtrField<std::string> f;
  *f.Add() = "z";
  *f.Add() = "z";
  EXPECT_EQ(SelectOutputs(Sig(), f).status().message(), "output 'z' is requested twice");
  EXPECT_EQ(SelectNamedOutputs(Sig(), {"y", "y"}).status().message(),
            "output 'y' is requested twice");
  EXPECT_EQ(*SelectNamedOutputs(Sig(), {"z", "y"}), (std::vector<size_t>{1, 0}));
}

}  // namespace
}  // namespace kiln::server
