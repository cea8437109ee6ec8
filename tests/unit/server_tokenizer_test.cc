// The tokenizer (server/generate/tokenizer.h): SentencePiece through its shim, in a process
// that links protobuf 3.21 (kiln_server does), round trips text; the refusals name their
// cause. And the generate body's prompt forms (server/http/http_generate.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "server/generate/tokenizer.h"
#include "server/http/http_generate.h"
#include "server/serving/generation_api.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;

// A 64-piece model of a small corpus in a temporary folder; "" without spm_train.
std::string Model() {
  static const std::string path = [] {
    if (std::system("command -v spm_train > /dev/null 2>&1") != 0) return std::string();
    const fs::path dir = fs::path(::testing::TempDir()) / ("kiln_tok_" + std::to_string(getpid()));
    fs::create_directories(dir);
    std::ofstream corpus(dir / "corpus.txt");
    for (int i = 0; i < 2000; ++i) corpus << "kiln serves the models fast and the tokens flow\n";
    corpus.close();
    const std::string cmd =
        "spm_train --input='" + (dir / "corpus.txt").string() + "' --model_prefix='" +
        (dir / "m").string() +
        "' --vocab_size=40 --hard_vocab_limit=false --minloglevel=2 > /dev/null 2>&1";
    return std::system(cmd.c_str()) == 0 ? (dir / "m.model").string() : std::string();
  }();
  return path;
}

TEST(Tokenizer, RoundTripsTextBesideTheServersProtobuf) {
  if (generate::TokenizerShimPath().empty()) GTEST_SKIP() << "this build has no tokenizer shim";
  if (Model().empty()) GTEST_SKIP() << "no spm_train (Debian: sentencepiece)";
  auto t = generate::Tokenizer::Load(Model());
  ASSERT_TRUE(t.ok()) << t.status();
  const int64_t vocab = (*t)->vocab_size();
  EXPECT_GT(vocab, 3);  // <unk>, <s>, </s> and the corpus's pieces
  EXPECT_LE(vocab, 40);
  const auto ids = (*t)->Encode("the models serve fast");
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_FALSE(ids->empty());
  for (int64_t id : *ids) EXPECT_LT(id, vocab);
  EXPECT_EQ((*t)->Decode(*ids).value(), "the models serve fast");
  EXPECT_EQ((*t)->Decode({}).value(), "");
  // Negative: an id outside the vocabulary is named.
  const auto bad = (*t)->Decode({1, vocab});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find(std::to_string(vocab)), std::string::npos);
}

// Streamed text, one id per message or a few at a time, adds up to the whole text decoded at
// once; ids beyond the vocabulary add nothing; without a tokenizer there is no text.
TEST(TextStream, ChunksAddUpToTheWholeText) {
  if (generate::TokenizerShimPath().empty()) GTEST_SKIP() << "this build has no tokenizer shim";
  if (Model().empty()) GTEST_SKIP() << "no spm_train (Debian: sentencepiece)";
  auto t = generate::Tokenizer::Load(Model());
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int64_t> ids =
      (*t)->Encode("the tokens flow and kiln serves the models").value();
  const std::string whole = (*t)->Decode(ids).value();
  for (size_t per : {size_t{1}, size_t{2}, size_t{5}, ids.size()}) {
    TextStream stream(t->get());
    std::string text;
    for (size_t i = 0; i < ids.size(); i += per) {
      generate::StreamChunk c;
      for (size_t j = i; j < std::min(ids.size(), i + per); ++j) c.tokens.push_back({ids[j], 0.0});
      c.tokens.push_back({(*t)->vocab_size() + 7, 0.0});  // no text
      c.done = i + per >= ids.size();
      text += stream.Next(c).value();
    }
    EXPECT_EQ(text, whole) << per << " ids per message";
  }
  // Negative: no tokenizer, no text.
  TextStream none(nullptr);
  EXPECT_FALSE(none.Next(generate::StreamChunk{}).has_value());
}

TEST(Tokenizer, AFileThatIsNoModelIsRefusedNamingIt) {
  if (generate::TokenizerShimPath().empty()) GTEST_SKIP() << "this build has no tokenizer shim";
  const fs::path junk = fs::path(::testing::TempDir()) / ("kiln_junk_" + std::to_string(getpid()));
  std::ofstream(junk) << "not a sentencepiece model";
  auto t = generate::Tokenizer::Load(junk.string());
  EXPECT_TRUE(absl::IsFailedPrecondition(t.status())) << t.status();
  EXPECT_NE(t.status().message().find(junk.string()), std::string::npos) << t.status();
  auto missing = generate::Tokenizer::Load("/nonexistent/tokenizer.model");
  EXPECT_FALSE(missing.ok());
  fs::remove(junk);
}

TEST(GenerateBody, TakesIdsOrTextButNotBoth) {
  const json::Limits limits{32};
  auto ids = ParseGenerateBody(R"({"input_ids": [3, 4]})", limits);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->params.prompt, (std::vector<int64_t>{3, 4}));
  EXPECT_FALSE(ids->text);
  auto text =
      ParseGenerateBody(R"({"text_input": "hello", "parameters": {"max_tokens": 2}})", limits);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text->text, "hello");
  EXPECT_TRUE(text->params.prompt.empty());
  for (const char* bad : {R"({"text_input": "a", "input_ids": [1]})", R"({"text_input": 3})",
                          R"({"parameters": {}})"}) {
    auto r = ParseGenerateBody(bad, limits);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << bad;
  }
}

}  // namespace
}  // namespace kiln::server
