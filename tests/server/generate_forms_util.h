// What the decoder export forms test (generate_forms_test.cc) checks its models with: exact
// lengths in GetModel, concurrent streams against their runs alone, and Predict requests
// written for an export against the export on the reference interpreter.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/v1/generate.grpc.pb.h"
#include "tests/server/generate_harness.h"
#include "tests/server/test_server.h"

namespace kiln::server::testing {

inline constexpr int64_t kVocab = 1000;  // the step models' test size

// Generates at exact lengths: every step a shape of its own, built on its first use.
inline void ExpectExactLengths(const v1::ModelInfo& info, const std::string& why) {
  ASSERT_TRUE(info.generation().enabled()) << info.generation().refused();
  EXPECT_NE(info.generation().exact_lengths().find(why), std::string::npos)
      << info.generation().exact_lengths();
  EXPECT_FALSE(info.generation().kv_in_place());
  EXPECT_EQ(info.dynamic_dim_ranges().at("past_sequence_length").min(), 0);
}

// Four streams at once on `model` (two of one length) give the tokens each gives alone, and
// one of them the reference's (`onnx` recomputed from an empty cache); nothing is built after
// READY and the cache is appended in place.
inline void ExpectConcurrentStreamsMatch(TestServer& server, v1::GenerationService::Stub& stub,
                                         const std::string& model, const std::string& onnx) {
  std::vector<std::vector<int64_t>> prompts, alone(4), together(4);
  for (int i = 0; i < 4; ++i)
    prompts.push_back(RandomPrompt(i == 3 ? 5 : 5 + 7 * i, 30 + i, kVocab));
  for (int i = 0; i < 4; ++i) {
    v1::GenerateRequest req = GenerateRequestFor(prompts[i], 20, model);
    req.set_ignore_eos(true);
    ASSERT_TRUE(StreamTokens(stub, req, alone[i]).ok());
  }
  std::vector<std::thread> threads;
  std::vector<grpc::Status> status(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto own = v1::GenerationService::NewStub(server.channel());
      v1::GenerateRequest req = GenerateRequestFor(prompts[i], 20, model);
      req.set_ignore_eos(true);
      status[i] = StreamTokens(*own, req, together[i]);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(status[i].ok()) << status[i].error_message();
    EXPECT_EQ(together[i], alone[i]) << "stream " << i;
  }
  ExpectReferenceTokens(onnx, prompts[1], alone[1], kVocab, NoCache::kEmptyPast);
  v1::ModelInfo info;
  ASSERT_TRUE(server.GetModel(model, 0, &info).ok());
  EXPECT_EQ(info.shape_counters().builds(), 0) << "a step built an engine after READY";
  EXPECT_GT(info.generation().steps_in_place(), 0);
}

// Two rows of 3 new tokens after 2 cached positions, as a request written for the export sends
// them (and, given `mask`, with the added input).
inline v1::PredictRequest MaskedPredict(const std::vector<int64_t>& ids,
                                        const std::vector<float>& past,
                                        const std::vector<int64_t>& mask,
                                        const std::string& model = "no_mask_cpu") {
  v1::PredictRequest req;
  req.set_model(model);
  auto add = [&](const std::string& name, v1::DataType dtype, std::vector<int64_t> shape) {
    v1::Tensor& t = (*req.mutable_inputs())[name];
    t.set_dtype(dtype);
    for (int64_t d : shape) t.add_shape(d);
    return &t;
  };
  v1::Tensor* t = add("input_ids", v1::DATA_TYPE_INT64, {2, 3});
  for (int64_t id : ids) t->add_int64_data(id);
  for (int layer = 0; layer < 2; ++layer) {
    for (const char* kind : {"key", "value"}) {
      t = add(absl::StrCat("past_key_values.", layer, ".", kind), v1::DATA_TYPE_FLOAT,
              {2, 4, 2, 16});
      for (float v : past) t->add_float_data(v);
    }
  }
  if (!mask.empty()) {
    t = add("attention_mask", v1::DATA_TYPE_INT64, {2, 5});
    for (int64_t m : mask) t->add_int64_data(m);
  }
  return req;
}

inline std::vector<float> Floats(const v1::Tensor& t) {
  if (t.raw_data().empty()) return {t.float_data().begin(), t.float_data().end()};
  std::vector<float> v(t.raw_data().size() / sizeof(float));
  std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
  return v;
}

// The export itself on the reference, fed what MaskedPredict sends, computes `got`'s logits.
inline void ExpectExportLogits(const std::string& onnx, const std::vector<int64_t>& ids,
                               const std::vector<float>& past, const std::vector<int64_t>& mask,
                               const v1::PredictResponse& got) {
  auto graph = onnx_io::ImportModelBytes(onnx);
  ASSERT_TRUE(graph.ok()) << graph.status();
  ref::TensorMap feed{{"input_ids", Tensor::FromInt64(ids, {2, 3})}};
  for (const Value* in : (*graph)->inputs) {
    if (in->name == "attention_mask") {
      feed[in->name] = Tensor::FromInt64(mask, {2, 5});
    } else if (in->name != "input_ids") {
      feed[in->name] = Tensor::FromFloat(past, {2, 4, 2, 16});
    }
  }
  auto want = ref::Run(**graph, feed);
  ASSERT_TRUE(want.ok()) << want.status();
  const std::vector<float> logits = Floats(got.outputs().at("logits"));
  const Tensor& w = want->at("logits");
  ASSERT_EQ(static_cast<int64_t>(logits.size()), w.numel());
  for (int64_t i = 0; i < w.numel(); ++i) {
    ASSERT_NEAR(logits[static_cast<size_t>(i)], w.GetDouble(i),
                1e-4 * (1 + std::abs(w.GetDouble(i))))
        << "logit " << i;
  }
}

inline std::vector<float> SomePast() {
  std::vector<float> past(2 * 4 * 2 * 16);
  for (size_t i = 0; i < past.size(); ++i) past[i] = 0.01f * static_cast<float>(i % 37);
  return past;
}

}  // namespace kiln::server::testing
