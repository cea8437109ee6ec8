// Decoder export forms through kilnd beyond the plain decoder with past:
// - merged decoders, the single-file export (Hugging Face Optimum's decoder_model_merged.onnx)
//   with `If(use_cache_branch)` around a first-step branch and a cache branch, written by
//   tests/models/merged_decoder.py over the GPT-2-style and the LLaMA-style step. kilnd binds
//   use_cache_branch to true at load (server/model/bound_inputs.h), the compiler inlines the
//   cache branch (inline_constant_if), and the model generates like the decoder with past it
//   contains: no If left to the reference fallback, its cache appended in place, every token
//   checked against the reference running the model's *other* branch (the first-step graph,
//   use_cache_branch false) over the whole sequence;
// - prefix sharing on the real engines: a repeated prompt's whole pages come from the cache;
// - decoders without a position_ids input: positions derived from the attention mask generate
//   token-exact on shape classes (the padding stays hidden); positions counted from the cache's
//   length are read from the mask's extent (server/model/mask_positions.h) and generate
//   token-exact on shape classes too, alone and four streams at once; a Predict gets the
//   export's positions, or is refused where no row holds its last cached position; kept as
//   they are (`cache_mask: off`) they generate at exact cache lengths, token-exact;
// - decoders without an attention mask: the server adds one (server/model/cache_mask.h), proven
//   at load, and they generate token-exact on shape classes with no config at all, building
//   nothing after READY; a Predict may leave the added input out. With
//   `generation.cache_mask: off` they run at exact lengths, token-exact too, and a configured
//   cache range that cannot start empty is refused.
#include <gtest/gtest.h>

#include "kiln/v1/generate.grpc.pb.h"
#include "tests/server/generate_forms_util.h"
#include "tests/server/generate_harness.h"
#include "tests/server/test_server.h"

namespace kiln::server::testing {
namespace {

class ExportForms : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new TestServer("generate_merged");
    gpt_ = new std::string(WriteDecoder(*server_, "merged_decoder.py", "merged"));
    llama_ = new std::string(
        WriteDecoder(*server_, "merged_decoder.py", "merged_llama", "--base llama_step"));
    from_mask_ =
        new std::string(WriteDecoder(*server_, "decoder_step.py", "from_mask", "--positions mask"));
    from_past_ =
        new std::string(WriteDecoder(*server_, "decoder_step.py", "from_past", "--positions past"));
    const std::string past_dims =
        "dynamic_dims: {past_sequence_length: [0, 96], sequence: {min: 1, max: 16}}\n";
    std::ofstream(server_->repo() / "from_past/config.yaml") << "device: cpu\nmax_batch_size: 2\n"
                                                             << past_dims;
    // The same export with two engine instances: the loop runs two steps at once.
    from_past_lanes_ = new std::string(
        WriteDecoder(*server_, "decoder_step.py", "from_past_lanes", "--positions past"));
    std::ofstream(server_->repo() / "from_past_lanes/config.yaml")
        << "device: cpu\nmax_batch_size: 2\ninstances: 2\n"
        << past_dims;
    // The same export kept as it is: exact lengths.
    const std::string from_past_exact =
        WriteDecoder(*server_, "decoder_step.py", "from_past_exact", "--positions past");
    std::ofstream(server_->repo() / "from_past_exact/config.yaml")
        << "device: cpu\nmax_batch_size: 2\n"
        << past_dims << "generation: {cache_mask: off}\n";
    // The export a plain torch.onnx.export of a decoder with past gives: no mask, positions
    // from the cache's length; no config.
    no_mask_ = new std::string(
        WriteDecoder(*server_, "decoder_step.py", "no_mask", "--no-mask --positions past"));
    fs::remove(server_->repo() / "no_mask/config.yaml");
    // On the CPU engine, a cache range from an empty one: the maskless exports below.
    auto on_cpu_engine = [](const std::string& model, int rows) {
      std::ofstream(server_->repo() / model / "config.yaml")
          << "device: cpu\nmax_batch_size: " << rows
          << "\ndynamic_dims: {past_sequence_length: [0, 96], sequence: {min: 1, max: 16, "
             "classes: [1, 16]}}\n";
    };
    // The LLaMA-style step exported so (rotary angles gathered at the cache's length onward,
    // grouped-query attention).
    llama_no_mask_ = new std::string(
        WriteDecoder(*server_, "llama_step.py", "llama_no_mask", "--no-mask --positions past"));
    on_cpu_engine("llama_no_mask", 2);
    // Written in PyTorch as transformers' GPT-2 computes and exported by torch.onnx.export,
    // with and without its mask, and in the later form with a cache_position (no torch: those
    // tests skip).
    torch_gpt_ = new std::string(WriteDecoder(*server_, "torch_decoder.py", "torch_gpt"));
    torch_no_mask_ =
        new std::string(WriteDecoder(*server_, "torch_decoder.py", "torch_no_mask", "--no-mask"));
    torch_cache_position_ = new std::string(
        WriteDecoder(*server_, "torch_decoder.py", "torch_cache_position", "--cache-position"));
    for (const char* m : {"torch_gpt", "torch_no_mask", "torch_cache_position"}) {
      if (fs::exists(server_->repo() / m)) on_cpu_engine(m, 4);
    }
    // With its mask, positions still counted from the cache's length.
    llama_from_past_ = new std::string(
        WriteDecoder(*server_, "llama_step.py", "llama_from_past", "--positions past"));
    on_cpu_engine("llama_from_past", 2);
    // The GPT-2-style export, rows batched: steps append in place.
    const std::string on_cpu =
        WriteDecoder(*server_, "decoder_step.py", "no_mask_cpu", "--no-mask --positions past");
    on_cpu_engine("no_mask_cpu", 4);
    // The same export with two engine instances: the loop runs two steps at once.
    from_past_lanes_ = new std::string(
        WriteDecoder(*server_, "decoder_step.py", "from_past_lanes", "--positions past"));
    std::ofstream(server_->repo() / "from_past_lanes/config.yaml")
        << "device: cpu\nmax_batch_size: 2\ninstances: 2\n"
        << past_dims;
    // The same export kept as it is: exact lengths.
    const std::string exact =
        WriteDecoder(*server_, "decoder_step.py", "no_mask_exact", "--no-mask --positions past");
    std::ofstream(server_->repo() / "no_mask_exact/config.yaml")
        << "generation: {cache_mask: off}\n";
    // A maskless one (positions fed) whose configured cache range starts at 1, kept as it is.
    const std::string from_one =
        WriteDecoder(*server_, "decoder_step.py", "no_mask_from_one", "--no-mask");
    std::ofstream(server_->repo() / "no_mask_from_one/config.yaml", std::ios::app)
        << "generation: {cache_mask: off}\n";
    // No config at all: the server's defaults and the decoder's own dims.
    bare_ = new std::string(WriteDecoder(*server_, "decoder_step.py", "bare"));
    fs::remove(server_->repo() / "bare/config.yaml");
    // The same model (same weights) under other names, mapped by generation.tensors.
    const std::string renamed =
        WriteDecoder(*server_, "decoder_step.py", "renamed", "--other-names");
    std::ofstream(server_->repo() / "renamed/config.yaml", std::ios::app)
        << "generation: {tensors: {input_ids: tokens, attention_mask: mask, position_ids: "
           "positions, "
           "logits: scores, cache: {k_cache_0: k_cache_out_0, v_cache_0: v_cache_out_0, "
           "k_cache_1: k_cache_out_1, v_cache_1: v_cache_out_1}}}\n";
    if (gpt_->empty() || llama_->empty() || from_mask_->empty() || from_past_->empty() ||
        no_mask_->empty() || llama_no_mask_->empty() || llama_from_past_->empty() ||
        on_cpu.empty() || exact.empty() || from_one.empty() || bare_->empty() || renamed.empty() ||
        from_past_exact.empty()) {
      gpt_->clear();
      return;
    }
    server_->Start();
    ready_ = server_->WaitReady(300);
  }
  static void TearDownTestSuite() {
    delete server_;
    delete gpt_;
    delete llama_;
    delete from_mask_;
    delete from_past_;
    delete no_mask_;
    delete llama_no_mask_;
    delete llama_from_past_;
    delete torch_gpt_;
    delete torch_no_mask_;
    delete torch_cache_position_;
    delete bare_;
    delete from_past_lanes_;
  }
  void SetUp() override {
    if (gpt_->empty() || llama_->empty()) {
      GTEST_SKIP() << "tests/models --write failed (python3-onnx?)";
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
    ASSERT_EQ(info.bound_inputs_size(), 1);
    EXPECT_EQ(info.bound_inputs(0).rfind("use_cache_branch = true", 0), 0u) << info.bound_inputs(0);
    ASSERT_GT(info.engines_size(), 0);
    for (const auto& e : info.engines()) {
      EXPECT_EQ(e.fallback_ops(), 0) << "batch " << e.batch() << ": the If was not inlined";
    }
  }

  // 64 greedy tokens after a prompt of `n`, each the reference's.
  void GenerateAndCheck(const std::string& model, const std::string& onnx, int64_t n, uint32_t seed,
                        NoCache how = NoCache::kMergedFirstBranch) {
    const std::vector<int64_t> prompt = RandomPrompt(n, seed, kVocab);
    v1::GenerateRequest req = GenerateRequestFor(prompt, 64, model);
    req.set_ignore_eos(true);
    std::vector<int64_t> ids;
    grpc::Status s = StreamTokens(*stub_, req, ids);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(ids.size(), 64u);
    ExpectReferenceTokens(onnx, prompt, ids, kVocab, how);
  }

  // `model` generates on shape classes over the cache's length, appending in place, GetModel's
  // cache_mask starting with `how`: 64 tokens after a prompt of `n`, each the export's
  // (recomputed from an empty cache), and nothing built after READY.
  void ExpectRewriteGenerates(const std::string& model, const std::string& onnx,
                              const std::string& how, int64_t n, uint32_t seed) {
    v1::ModelInfo info;
    ASSERT_TRUE(server_->GetModel(model, 0, &info).ok());
    ASSERT_TRUE(info.generation().enabled()) << info.generation().refused();
    EXPECT_EQ(info.generation().cache_mask().rfind(how, 0), 0u) << info.generation().cache_mask();
    EXPECT_TRUE(info.generation().exact_lengths().empty()) << info.generation().exact_lengths();
    EXPECT_TRUE(info.shape_classes().count("past_sequence_length"));
    EXPECT_TRUE(info.generation().kv_in_place());
    GenerateAndCheck(model, onnx, n, seed, NoCache::kEmptyPast);
    ASSERT_TRUE(server_->GetModel(model, 0, &info).ok());
    EXPECT_EQ(info.shape_counters().builds(), 0) << "a step built an engine after READY";
  }

  static TestServer* server_;
  static std::string *gpt_, *llama_, *from_mask_, *from_past_, *no_mask_, *llama_no_mask_,
      *llama_from_past_, *torch_gpt_, *torch_no_mask_, *torch_cache_position_, *bare_,
      *from_past_lanes_;
  static bool ready_;
  std::unique_ptr<v1::GenerationService::Stub> stub_;
};

TestServer* ExportForms::server_ = nullptr;
std::string* ExportForms::gpt_ = nullptr;
std::string* ExportForms::llama_ = nullptr;
std::string* ExportForms::from_mask_ = nullptr;
std::string* ExportForms::from_past_ = nullptr;
std::string* ExportForms::no_mask_ = nullptr;
std::string* ExportForms::llama_no_mask_ = nullptr;
std::string* ExportForms::llama_from_past_ = nullptr;
std::string* ExportForms::torch_gpt_ = nullptr;
std::string* ExportForms::torch_no_mask_ = nullptr;
std::string* ExportForms::torch_cache_position_ = nullptr;
std::string* ExportForms::bare_ = nullptr;
std::string* ExportForms::from_past_lanes_ = nullptr;
bool ExportForms::ready_ = false;

TEST_F(ExportForms, GptStyleMergedDecoderAppendsInPlaceAndMatchesTheReference) {
  v1::ModelInfo info;
  ExpectServedAsItsCacheBranch("merged", info);
  // The inlined branch's Concats write the If's outputs themselves: the cache appends.
  EXPECT_TRUE(info.generation().kv_in_place());
  GenerateAndCheck("merged", *gpt_, 32, 21);
  ASSERT_TRUE(server_->GetModel("merged", 0, &info).ok());
  EXPECT_EQ(info.shape_counters().builds(), 0) << "a step built an engine after READY";
  // The prompt's 32 tokens: two whole chunks of 16 on the last-position engines (the cut
  // reaches through the inlined If), appending; then the 63 decode steps.
  EXPECT_EQ(info.generation().steps_last_position(), 2) << info.generation().last_position();
  EXPECT_GE(info.generation().steps_in_place(), 65);
}

TEST_F(ExportForms, ADecoderWithNoConfigGeneratesOnShapeClassesOfItsContext) {
  v1::ModelInfo info;
  ASSERT_TRUE(server_->GetModel("bare", 0, &info).ok());
  ASSERT_TRUE(info.generation().enabled())
      << info.generation().refused() << info.shape_classes_refused();
  // The context from the 1024-row position table position_ids index; steps of 1 and 64 new
  // positions (decode, the default prefill chunk).
  const auto& ranges = info.dynamic_dim_ranges();
  ASSERT_TRUE(ranges.count("past_sequence_length") && ranges.count("sequence"));
  EXPECT_EQ(ranges.at("past_sequence_length").max(), 1023);
  EXPECT_EQ(ranges.at("sequence").max(), 64);
  EXPECT_EQ(info.shape_classes().at("sequence").sizes_size(), 2);
  EXPECT_EQ(info.shape_classes().at("past_sequence_length").sizes_size(), 14);
  EXPECT_EQ(info.generation().max_context(), 1023);
  // 6 tokens padded to a chunk, then a whole chunk of 64, both on the last-position engines
  // (cut by the mask the server added).
  GenerateAndCheck("bare", *bare_, 70, 24, NoCache::kMaskedSlot);
  ASSERT_TRUE(server_->GetModel("bare", 0, &info).ok());
  EXPECT_EQ(info.shape_counters().builds(), 0) << "a step built an engine after READY";
  EXPECT_EQ(info.generation().steps_last_position(), 2) << info.generation().last_position();
  EXPECT_EQ(info.generation().steps_last_padded(), 1);
}

// Another exporter's tensor names, given in the config: the same tokens as the same model
// under the usual names (checked against the reference above).
TEST_F(ExportForms, TensorNamesFromTheConfigGenerateTheSameTokens) {
  v1::ModelInfo info;
  ASSERT_TRUE(server_->GetModel("renamed", 0, &info).ok());
  ASSERT_TRUE(info.generation().enabled()) << info.generation().refused();
  const std::vector<int64_t> prompt = RandomPrompt(21, 25, kVocab);
  std::vector<std::vector<int64_t>> out;
  for (const char* model : {"renamed", "bare"}) {
    v1::GenerateRequest req = GenerateRequestFor(prompt, 24, model);
    req.set_ignore_eos(true);
    std::vector<int64_t> ids;
    grpc::Status s = StreamTokens(*stub_, req, ids);
    ASSERT_TRUE(s.ok()) << model << ": " << s.error_message();
    ASSERT_EQ(ids.size(), 24u) << model;
    out.push_back(ids);
  }
  EXPECT_EQ(out[0], out[1]);
}

TEST_F(ExportForms, LlamaStyleMergedDecoderMatchesTheReference) {
  v1::ModelInfo info;
  ExpectServedAsItsCacheBranch("merged_llama", info);
  GenerateAndCheck("merged_llama", *llama_, 32, 22);
  ASSERT_TRUE(server_->GetModel("merged_llama", 0, &info).ok());
  EXPECT_EQ(info.generation().steps_last_position(), 2) << info.generation().last_position();
}

TEST_F(ExportForms, ARepeatedPromptReadsItsPagesAndMatchesTheReference) {
  // Pages of 16 positions: the second request takes the first's two whole prompt pages
  // (32 of its 40 tokens) from the cache instead of computing them.
  const std::vector<int64_t> prompt = RandomPrompt(40, 25, kVocab);
  v1::GenerateRequest req = GenerateRequestFor(prompt, 32, "merged");
  req.set_ignore_eos(true);
  std::vector<int64_t> first, second;
  ASSERT_TRUE(StreamTokens(*stub_, req, first).ok());
  v1::ModelInfo info;
  ASSERT_TRUE(server_->GetModel("merged", 0, &info).ok());
  const int64_t before = info.generation().prefix_tokens();
  EXPECT_GT(info.generation().pages_cached(), 0) << "the first request's pages stay cached";
  ASSERT_TRUE(StreamTokens(*stub_, req, second).ok());
  ASSERT_TRUE(server_->GetModel("merged", 0, &info).ok());
  EXPECT_EQ(info.generation().prefix_tokens() - before, 32);
  EXPECT_EQ(second, first);
  ExpectReferenceTokens(*gpt_, prompt, second, kVocab, NoCache::kMergedFirstBranch);
}

TEST_F(ExportForms, PositionsDerivedFromTheMaskGenerateTokenExact) {
  v1::ModelInfo info;
  ASSERT_TRUE(server_->GetModel("from_mask", 0, &info).ok());
  ASSERT_TRUE(info.generation().enabled()) << info.generation().refused();
  for (const auto& in : info.inputs()) EXPECT_NE(in.name(), "position_ids");
  GenerateAndCheck("from_mask", *from_mask_, 13, 23, NoCache::kMaskedSlot);
  ASSERT_TRUE(server_->GetModel("from_mask", 0, &info).ok());
  EXPECT_EQ(info.shape_counters().builds(), 0);
}

TEST_F(ExportForms, PositionsCountedFromTheCacheAreReadFromTheMaskOnShapeClasses) {
  ExpectRewriteGenerates("from_past", *from_past_, "positions read from 'attention_mask'", 13, 24);
}

TEST_F(ExportForms, ALlamaStyleDecoderCountingPositionsFromTheCacheReadsThemFromItsMask) {
  ExpectRewriteGenerates("llama_from_past", *llama_from_past_,
                         "positions read from 'attention_mask'", 20, 27);
}

TEST_F(ExportForms, PositionsCountedFromTheCacheKeptAsTheyAreGenerateAtExactLengths) {
  v1::ModelInfo info;
  ASSERT_TRUE(server_->GetModel("from_past_exact", 0, &info).ok());
  ExpectExactLengths(info, "no shape classes over 'past_sequence_length'");
  GenerateAndCheck("from_past_exact", *from_past_, 13, 24, NoCache::kEmptyPast);
  ASSERT_TRUE(server_->GetModel("from_past_exact", 0, &info).ok());
  // The prompt's step at an empty cache, then one shape per decode step.
  EXPECT_GE(info.shape_counters().builds(), 60);
}

TEST_F(ExportForms, ADecoderWithNoMaskGetsOneAndGeneratesOnShapeClassesWithNoConfig) {
  v1::ModelInfo info;
  ASSERT_TRUE(server_->GetModel("no_mask", 0, &info).ok());
  ASSERT_TRUE(info.generation().enabled()) << info.generation().refused();
  const std::string& mask = info.generation().cache_mask();
  EXPECT_EQ(mask.rfind("input 'attention_mask' added", 0), 0u) << mask;
  // Its positions are arange(past, past + sequence).unsqueeze(0): each row's are read from its
  // own mask row, so rows of any lengths share a step.
  EXPECT_NE(mask.find("each row's positions from its own mask row"), std::string::npos) << mask;
  EXPECT_TRUE(info.generation().exact_lengths().empty()) << info.generation().exact_lengths();
  EXPECT_TRUE(info.shape_classes().count("past_sequence_length"));
  bool has_mask = false;
  for (const auto& in : info.inputs()) has_mask |= in.name() == "attention_mask";
  EXPECT_TRUE(has_mask);
  EXPECT_EQ(info.dynamic_dim_ranges().at("past_sequence_length").max(), 1023);
  // Against the exported model (no mask), recomputed from an empty cache at every token; a
  // 70-token prompt takes a whole chunk on the last-position engines.
  GenerateAndCheck("no_mask", *no_mask_, 70, 25, NoCache::kEmptyPast);
  ASSERT_TRUE(server_->GetModel("no_mask", 0, &info).ok());
  EXPECT_EQ(info.shape_counters().builds(), 0) << "a step built an engine after READY";
  EXPECT_GE(info.generation().steps_last_position(), 1);
}

TEST_F(ExportForms, ALlamaStyleDecoderWithNoMaskGetsOneAndMatchesTheReference) {
  // A 20-token prompt: a chunk of 16 on the last-position engines, then the remainder first.
  ExpectRewriteGenerates("llama_no_mask", *llama_no_mask_, "input 'attention_mask' added", 20, 26);
}

TEST_F(ExportForms, ConcurrentStreamsOfAnAddedMaskOnTheCpuEngineMatchTheReference) {
  v1::ModelInfo info;
  ASSERT_TRUE(server_->GetModel("no_mask_cpu", 0, &info).ok());
  ASSERT_TRUE(info.generation().enabled()) << info.generation().refused();
  EXPECT_TRUE(info.generation().kv_in_place());
  // Rows of different lengths share a step, each row's positions its own.
  ExpectConcurrentStreamsMatch(*server_, *stub_, "no_mask_cpu", *no_mask_);
}

TEST_F(ExportForms, ConcurrentStreamsOfPositionsFromTheMaskMatchTheReference) {
  ExpectConcurrentStreamsMatch(*server_, *stub_, "from_past", *from_past_);
}

TEST_F(ExportForms, TwoInstancesRunStepsSideBySideAndMatchTheReference) {
  // Every shape class built twice before READY (nothing after), each engine on one of the
  // two instances' share of the cores.
  ExpectConcurrentStreamsMatch(*server_, *stub_, "from_past_lanes", *from_past_lanes_);
}

TEST_F(ExportForms, ATorchExportOfAGpt2ReadsItsPositionsFromItsMask) {
  if (torch_gpt_->empty()) GTEST_SKIP() << "tests/models/torch_decoder.py failed (no torch?)";
  ExpectRewriteGenerates("torch_gpt", *torch_gpt_, "positions read from 'attention_mask'", 13, 28);
  ExpectConcurrentStreamsMatch(*server_, *stub_, "torch_gpt", *torch_gpt_);
}

TEST_F(ExportForms, ATorchExportWithACachePositionReadsItsPositionsPerRow) {
  // transformers' later form: one Range gives the positions and places the causal mask. The
  // positions are read per row, the causal mask keeps the padded layout's.
  if (torch_cache_position_->empty()) {
    GTEST_SKIP() << "tests/models/torch_decoder.py failed (no torch?)";
  }
  ExpectRewriteGenerates("torch_cache_position", *torch_cache_position_,
                         "positions read from 'attention_mask'", 13, 30);
  ExpectConcurrentStreamsMatch(*server_, *stub_, "torch_cache_position", *torch_cache_position_);
}

TEST_F(ExportForms, ATorchExportOfAGpt2WithNoMaskGetsOne) {
  if (torch_no_mask_->empty()) GTEST_SKIP() << "tests/models/torch_decoder.py failed (no torch?)";
  ExpectRewriteGenerates("torch_no_mask", *torch_no_mask_, "input 'attention_mask' added", 13, 29);
}

TEST_F(ExportForms, APredictWithPositionsFromItsMaskGetsWhatTheExportComputes) {
  // Row 1 padded on the left (its first cached position hidden): the model counts positions
  // from the cache's length, and so does the server while each row holds its last cached
  // position.
  const std::vector<int64_t> ids = RandomPrompt(6, 42, kVocab);
  const std::vector<float> past = SomePast();
  std::vector<int64_t> mask(10, 1);
  mask[5] = 0;
  v1::PredictResponse got;
  grpc::Status s = server_->Predict(MaskedPredict(ids, past, mask, "from_past"), &got);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectExportLogits(*from_past_, ids, past, mask, got);
  // Row 1 hides its last cached position: refused, not computed at other positions.
  mask[6] = 0;
  s = server_->Predict(MaskedPredict(ids, past, mask, "from_past"), &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("row 1 hides its last cached position"), std::string::npos)
      << s.error_message();
}

TEST_F(ExportForms, APredictMayLeaveTheAddedMaskOutAndGetsWhatTheExportComputes) {
  std::vector<int64_t> ids = RandomPrompt(6, 41, kVocab);
  const std::vector<float> past = SomePast();
  v1::PredictResponse without, with;
  grpc::Status s = server_->Predict(MaskedPredict(ids, past, {}), &without);
  ASSERT_TRUE(s.ok()) << s.error_message();
  s = server_->Predict(MaskedPredict(ids, past, std::vector<int64_t>(10, 1)), &with);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Floats(without.outputs().at("logits")), Floats(with.outputs().at("logits")));
  ExpectExportLogits(*no_mask_, ids, past, {}, without);
  // Each row's positions are read from its own mask row: row 1 counting one cached position
  // leaves row 0 as it was.
  std::vector<int64_t> uneven(10, 1);
  uneven[6] = 0;
  s = server_->Predict(MaskedPredict(ids, past, uneven), &with);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::vector<float> all = Floats(without.outputs().at("logits"));
  const std::vector<float> row1_short = Floats(with.outputs().at("logits"));
  const size_t row = all.size() / 2;
  EXPECT_EQ(std::vector<float>(all.begin(), all.begin() + row),
            std::vector<float>(row1_short.begin(), row1_short.begin() + row));
  EXPECT_NE(std::vector<float>(all.begin() + row, all.end()),
            std::vector<float>(row1_short.begin() + row, row1_short.end()));
}

TEST_F(ExportForms, ADecoderWithNoMaskKeptAsItIsGeneratesAtExactLengths) {
  v1::ModelInfo info;
  ASSERT_TRUE(server_->GetModel("no_mask_exact", 0, &info).ok());
  ExpectExactLengths(info, "no input 'attention_mask'");
  EXPECT_NE(info.generation().cache_mask().find("generation.cache_mask is off"), std::string::npos)
      << info.generation().cache_mask();
  for (const auto& in : info.inputs()) EXPECT_NE(in.name(), "attention_mask");
  GenerateAndCheck("no_mask_exact", *no_mask_, 20, 25, NoCache::kEmptyPast);
}

TEST_F(ExportForms, ExactLengthsNeedACacheRangeFromZero) {
  v1::ModelInfo info;
  ASSERT_TRUE(server_->GetModel("no_mask_from_one", 0, &info).ok());
  EXPECT_FALSE(info.generation().enabled());
  EXPECT_NE(info.generation().refused().find("a range from 0"), std::string::npos)
      << info.generation().refused();
  std::vector<int64_t> ids;
  grpc::Status s = StreamTokens(
      *stub_, GenerateRequestFor(RandomPrompt(5, 24, kVocab), 4, "no_mask_from_one"), ids);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(ids.empty());
}

}  // namespace
}  // namespace kiln::server::testing
