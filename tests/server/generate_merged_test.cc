// Merged decoders through kilnd: the single-file export (Hugging Face Optimum's
// decoder_model_merged.onnx) with `If(use_cache_branch)` around a first-step branch and a
// cache branch, written by tests/models/merged_decoder.py over the GPT-2-style and the
// LLaMA-style step. kilnd binds use_cache_branch to true at load (server/model/bound_inputs.h),
// the compiler inlines the cache branch (inline_constant_if), and the model generates like
// the decoder with past it contains: no If left to the reference fallback, its cache appended
// in place, every token checked against the reference running the model's *other* branch
// (the first-step graph, use_cache_branch false) over the whole sequence.
#include <gtest/gtest.h>

#include "kiln/v1/generate.grpc.pb.h"
#include "tests/server/generate_harness.h"
#include "tests/server/test_server.h"

namespace kiln::server::testing {
namespace {

constexpr int64_t kVocab = 1000;  // the step models' test size

class MergedGeneration : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new TestServer("generate_merged");
    gpt_ = new std::string(WriteDecoder(*server_, "merged_decoder.py", "merged"));
    llama_ = new std::string(
        WriteDecoder(*server_, "merged_decoder.py", "merged_llama", "--base llama_step"));
    if (gpt_->empty() || llama_->empty()) return;
    server_->Start();
    ready_ = server_->WaitReady(300);
  }
  static void TearDownTestSuite() {
    delete server_;
    delete gpt_;
    delete llama_;
  }
  void SetUp() override {
    if (gpt_->empty() || llama_->empty()) {
      GTEST_SKIP() << "tests/models/merged_decoder.py --write failed (python3-onnx?)";
    }
    ASSERT_TRUE(ready_) << "a merged decoder did not become READY";
    stub_ = v1::GenerationService::NewStub(server_->channel());
  }

  // The model generates, takes no use_cache_branch, and runs no op on the fallback.
  static void ExpectServedAsItsCacheBranch(const std::string& model, v1::ModelInfo& info) {
    ASSERT_TRUE(server_->GetModel(model, 0, &info).ok());
    ASSERT_TRUE(info.generation().enabled())
        << info.generation().refused() << info.shape_classes_refused();
    for (const auto& in : info.inputs()) EXPECT_NE(in.name(), "use_cache_branch");
    ASSERT_GT(info.engines_size(), 0);
    for (const auto& e : info.engines()) {
      EXPECT_EQ(e.fallback_ops(), 0) << "batch " << e.batch() << ": the If was not inlined";
    }
  }

  // 64 greedy tokens after a prompt of `n`, each the reference's.
  void GenerateAndCheck(const std::string& model, const std::string& onnx, int64_t n,
                        uint32_t seed) {
    const std::vector<int64_t> prompt = RandomPrompt(n, seed, kVocab);
    v1::GenerateRequest req = GenerateRequestFor(prompt, 64, model);
    req.set_ignore_eos(true);
    std::vector<int64_t> ids;
    grpc::Status s = StreamTokens(*stub_, req, ids);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(ids.size(), 64u);
    ExpectReferenceTokens(onnx, prompt, ids, kVocab, NoCache::kMergedFirstBranch);
  }

  static TestServer* server_;
  static std::string *gpt_, *llama_;
  static bool ready_;
  std::unique_ptr<v1::GenerationService::Stub> stub_;
};

TestServer* MergedGeneration::server_ = nullptr;
std::string* MergedGeneration::gpt_ = nullptr;
std::string* MergedGeneration::llama_ = nullptr;
bool MergedGeneration::ready_ = false;

TEST_F(MergedGeneration, GptStyleMergedDecoderAppendsInPlaceAndMatchesTheReference) {
  v1::ModelInfo info;
  ExpectServedAsItsCacheBranch("merged", info);
  // The inlined branch's Concats write the If's outputs themselves: the cache appends.
  EXPECT_TRUE(info.generation().kv_in_place());
  GenerateAndCheck("merged", *gpt_, 11, 21);
  ASSERT_TRUE(server_->GetModel("merged", 0, &info).ok());
  EXPECT_EQ(info.shape_counters().builds(), 0) << "a step built an engine after READY";
  // The 63 decode steps after the prompt's (11 tokens, no sequence class: copied).
  EXPECT_GE(info.generation().steps_in_place(), 63);
}

TEST_F(MergedGeneration, LlamaStyleMergedDecoderMatchesTheReference) {
  v1::ModelInfo info;
  ExpectServedAsItsCacheBranch("merged_llama", info);
  GenerateAndCheck("merged_llama", *llama_, 9, 22);
}

}  // namespace
}  // namespace kiln::server::testing
