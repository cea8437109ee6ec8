// Text in and out of the generate extension: a decoder of tests/models/decoder_step.py with a
// SentencePiece tokenizer (trained here by Debian's spm_train) in its model folder. kilnd
// loads the tokenizer through its shim (server/generate/tokenizer.h): text_input gives the
// same tokens as the ids the tokenizer makes of it, and text_output is their text, whole in
// the unary answers (REST generate, kiln.v1 GenerateOnce) and piece by piece in the streams
// (generate_stream's events, kiln.v1 Generate's messages). Skipped, saying why, where
// spm_train or the shim is missing.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "base/json.h"
#include "kiln/v1/generate.grpc.pb.h"
#include "kiln/v1/model.grpc.pb.h"
#include "server/generate/tokenizer.h"
#include "tests/server/test_server.h"

namespace kiln::server::testing {
namespace {

constexpr char kText[] = "the quick brown fox serves models";

// A unigram model of at most 200 pieces of a small corpus of these words, in `dir`; "" on failure.
std::string TrainTokenizer(const fs::path& dir) {
  const char* words[] = {"the",  "quick",  "brown",  "fox",  "jumps",  "over", "lazy",    "dog",
                         "kiln", "serves", "models", "fast", "tokens", "text", "generate"};
  std::ofstream corpus(dir / "corpus.txt");
  uint32_t s = 7;
  for (int line = 0; line < 3000; ++line) {
    for (int w = 0; w < 10; ++w) {
      s = s * 1103515245u + 12345u;
      corpus << words[(s >> 16) % 15] << (w == 9 ? '\n' : ' ');
    }
  }
  corpus.close();
  const std::string cmd =
      "spm_train --input='" + (dir / "corpus.txt").string() + "' --model_prefix='" +
      (dir / "tok").string() +
      "' --vocab_size=200 --hard_vocab_limit=false --minloglevel=2 > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return "";
  return (dir / "tok.model").string();
}

std::string Ids(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

std::vector<int64_t> IdsOf(const json::Value& doc) {
  std::vector<int64_t> ids;
  if (const json::Value* list = doc.Find("output_ids")) {
    for (const json::Value& v : list->items()) ids.push_back(json::AsInt64(v, "id").value());
  }
  return ids;
}

TEST(GenerateText, TextInputAndOutputFollowTheModelsTokenizer) {
  if (std::system("command -v spm_train > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no spm_train (Debian: sentencepiece)";
  }
  if (generate::TokenizerShimPath().empty()) GTEST_SKIP() << "this build has no tokenizer shim";
  TestServer server("generate_text");
  const std::string model = TrainTokenizer(server.dir());
  ASSERT_FALSE(model.empty()) << "spm_train failed";
  absl::StatusOr<std::unique_ptr<generate::Tokenizer>> tok = generate::Tokenizer::Load(model);
  ASSERT_TRUE(tok.ok()) << tok.status();
  // The decoder's vocabulary is the tokenizer's, so every generated id has its text.
  const std::string cmd = "/usr/bin/python3 '" +
                          (SourceDir() / "tests/models/decoder_step.py").string() + "' --vocab " +
                          std::to_string((*tok)->vocab_size()) + " --write '" +
                          (server.dir() / "dec").string() + "' > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0)
    GTEST_SKIP() << "decoder_step.py --write failed (python3-onnx?)";
  fs::create_directories(server.repo() / "dec/1");
  fs::copy_file(server.dir() / "dec/model.onnx", server.repo() / "dec/1/model.onnx");
  fs::copy_file(model, server.repo() / "dec/tokenizer.model");  // the model's, for every version
  std::ofstream(server.repo() / "dec/config.yaml")
      << "device: cpu\nmax_batch_size: 1\n"
         "dynamic_dims: {past_sequence_length: [1, 64], sequence: [1, 16]}\n";
  server.Start();
  ASSERT_TRUE(server.WaitReady(300)) << "the decoder did not become READY";

  const std::vector<int64_t> prompt = (*tok)->Encode(kText).value();
  ASSERT_FALSE(prompt.empty());
  httplib::Client http("127.0.0.1", server.http_port());
  http.set_read_timeout(60, 0);
  const std::string params = R"("parameters": {"max_tokens": 10, "ignore_eos": true})";
  auto by_ids =
      http.Post("/v2/models/dec/generate", "{\"input_ids\": [" + Ids(prompt) + "], " + params + "}",
                "application/json");
  auto by_text = http.Post("/v2/models/dec/generate",
                           std::string("{\"text_input\": \"") + kText + "\", " + params + "}",
                           "application/json");
  ASSERT_TRUE(by_ids && by_text);
  ASSERT_EQ(by_ids->status, 200) << by_ids->body;
  ASSERT_EQ(by_text->status, 200) << by_text->body;
  const json::Value a = json::Parse(by_ids->body).value(), b = json::Parse(by_text->body).value();
  const std::vector<int64_t> out = IdsOf(b);
  EXPECT_EQ(out, IdsOf(a));  // the text was the tokenizer's ids
  ASSERT_EQ(out.size(), 10u);
  const std::string want = (*tok)->Decode(out).value();
  ASSERT_NE(b.Find("text_output"), nullptr) << by_text->body;
  EXPECT_EQ(b.Find("text_output")->text(), want);

  auto sse = http.Post("/v2/models/dec/generate_stream",
                       std::string("{\"text_input\": \"") + kText + "\", " + params + "}",
                       "application/json");
  ASSERT_TRUE(sse);
  ASSERT_EQ(sse->status, 200) << sse->body;
  std::string streamed;
  std::istringstream events(sse->body);
  for (std::string line; std::getline(events, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    const json::Value e = json::Parse(line.substr(6)).value();
    if (const json::Value* t = e.Find("text_output")) streamed += t->text();
  }
  EXPECT_EQ(streamed, want);

  // GetModel says the model has text, and with how many pieces.
  {
    auto models = v1::ModelService::NewStub(server.channel());
    grpc::ClientContext ctx;
    v1::GetModelRequest get;
    get.set_name("dec");
    v1::ModelInfo info;
    ASSERT_TRUE(models->GetModel(&ctx, get, &info).ok());
    EXPECT_EQ(info.generation().tokenizer_pieces(), (*tok)->vocab_size());
    EXPECT_EQ(info.generation().tokenizer_refused(), "");
  }

  // kiln.v1 the same: GenerateOnce's text whole, Generate's piece by piece.
  auto stub = v1::GenerationService::NewStub(server.channel());
  v1::GenerateRequest req;
  req.set_model("dec");
  req.set_text_input(kText);
  req.set_max_tokens(10);
  req.set_ignore_eos(true);
  {
    grpc::ClientContext ctx;
    v1::GenerateResponse once;
    ASSERT_TRUE(stub->GenerateOnce(&ctx, req, &once).ok());
    EXPECT_EQ(std::vector<int64_t>(once.output_ids().begin(), once.output_ids().end()), out);
    EXPECT_EQ(once.text_output(), want);
  }
  {
    grpc::ClientContext ctx;
    auto reader = stub->Generate(&ctx, req);
    std::string pieces;
    for (v1::GenerateResponse r; reader->Read(&r);) pieces += r.text_output();
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(pieces, want);
  }
  {
    grpc::ClientContext ctx;
    v1::GenerateResponse refused;
    req.add_input_ids(1);  // both prompts
    EXPECT_EQ(stub->GenerateOnce(&ctx, req, &refused).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }

  // Negative: both prompts, or a text that is not a string, are refused before any token.
  for (const std::string& bad : {std::string("{\"text_input\": \"a\", \"input_ids\": [1]}"),
                                 std::string("{\"text_input\": 3}")}) {
    auto r = http.Post("/v2/models/dec/generate", bad, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad << ": " << r->body;
  }
}

}  // namespace
}  // namespace kiln::server::testing
