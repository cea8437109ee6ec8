// What the kilnd generation tests share: a decoder of tests/models written into a model
// repository, prompts, a streamed Generate, and the check of every served token against the
// reference interpreter recomputing the whole sequence without a cache.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compiler/onnx/importer.h"
#include "kiln/v1/generate.grpc.pb.h"
#include "ops/interpreter.h"
#include "tests/server/test_server.h"

namespace kiln::server::testing {

// Writes tests/models/<script> (with `args`) as model `name` of the repository, with a config
// for a context of 96 and prefill chunks of 16; its bytes ("" on failure).
inline std::string WriteDecoder(TestServer& server, const std::string& script,
                                const std::string& name, const std::string& args = "") {
  const std::string cmd = "/usr/bin/python3 '" + (SourceDir() / "tests/models" / script).string() +
                          "' --write '" + (server.dir() / name).string() + "' " + args +
                          " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return "";
  const std::string onnx = ReadFile(server.dir() / name / "model.onnx");
  fs::create_directories(server.repo() / name / "1");
  std::ofstream(server.repo() / name / "1/model.onnx", std::ios::binary) << onnx;
  std::ofstream(server.repo() / name / "config.yaml")
      << "device: cpu\nmax_batch_size: 2\n"
         "dynamic_dims: {past_sequence_length: [1, 96], sequence: {min: 1, max: 16, classes: [1, "
         "16]}}\n";
  return onnx;
}

inline std::vector<int64_t> RandomPrompt(int64_t n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<int64_t>(rng() % vocab));
  return p;
}

inline v1::GenerateRequest GenerateRequestFor(const std::vector<int64_t>& prompt,
                                              int64_t max_tokens, const std::string& model) {
  v1::GenerateRequest r;
  r.set_model(model);
  for (int64_t t : prompt) r.add_input_ids(t);
  r.set_max_tokens(max_tokens);
  return r;
}

// Streams `req`; every message's ids in order, and the final status and message.
inline grpc::Status StreamTokens(v1::GenerationService::Stub& stub, const v1::GenerateRequest& req,
                                 std::vector<int64_t>& ids, v1::GenerateResponse* last = nullptr,
                                 int seconds = 120) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
    ids.insert(ids.end(), m.output_ids().begin(), m.output_ids().end());
    if (last) *last = m;
  }
  return reader->Finish();
}

// How the reference is fed a whole sequence with no cache: a decoder with past takes one
// masked position of zeros, or an empty past (a model that counts positions from the
// cache's length, or has no mask to hide a slot); a merged decoder takes its first-step
// branch (use_cache_branch false) and an empty past.
enum class NoCache { kMaskedSlot, kEmptyPast, kMergedFirstBranch };

// Each of `out` is the reference's most likely next token after prompt ++ out[:i],
// recomputed from scratch, or within 1e-4 of it (a near-tie float32 may break the other way).
inline void ExpectReferenceTokens(const std::string& onnx, const std::vector<int64_t>& prompt,
                                  const std::vector<int64_t>& out, int64_t vocab,
                                  NoCache how = NoCache::kMaskedSlot) {
  auto graph = onnx_io::ImportModelBytes(onnx);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const int64_t slot = how == NoCache::kMaskedSlot ? 1 : 0;
  std::vector<int64_t> seq = prompt;
  for (size_t i = 0; i < out.size(); ++i) {
    const auto n = static_cast<int64_t>(seq.size());
    ref::TensorMap feed;
    feed["input_ids"] = Tensor::FromInt64(seq, {1, n});
    std::vector<int64_t> pos(static_cast<size_t>(n)), mask(static_cast<size_t>(n + slot), 1);
    for (int64_t k = 0; k < n; ++k) pos[static_cast<size_t>(k)] = k;
    if (slot) mask[0] = 0;
    if ((*graph)->FindValue("position_ids")) feed["position_ids"] = Tensor::FromInt64(pos, {1, n});
    if ((*graph)->FindValue("attention_mask")) {
      feed["attention_mask"] = Tensor::FromInt64(mask, {1, n + slot});
    }
    if (how == NoCache::kMergedFirstBranch) {
      Tensor first(DType::kBool, {1});
      first.SetInt(0, 0);
      feed["use_cache_branch"] = first;
    }
    for (const Value* in : (*graph)->inputs) {
      if (in->name.rfind("past_key_values", 0) != 0) continue;
      const std::vector<Dim>& d = *in->shape;  // [batch, heads, past, head_dim]
      feed[in->name] = Tensor(DType::kFloat32, {1, d[1].value, slot, d[3].value});
    }
    auto got = ref::Run(**graph, feed);
    ASSERT_TRUE(got.ok()) << got.status();
    const Tensor& logits = got->at("logits");
    double best = -1e300;
    int64_t arg = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double l = logits.GetDouble((n - 1) * vocab + v);
      if (l > best) best = l, arg = v;
    }
    const double mine = logits.GetDouble((n - 1) * vocab + out[i]);
    ASSERT_TRUE(out[i] == arg || best - mine <= 1e-4 * (1 + std::abs(best)))
        << "token " << i << ": served " << out[i] << " (logit " << mine << "), reference " << arg
        << " (logit " << best << ")";
    seq.push_back(out[i]);
  }
}

}  // namespace kiln::server::testing
