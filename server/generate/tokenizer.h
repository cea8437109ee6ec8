// A SentencePiece tokenizer shipped with a model (`tokenizer.model` in its folder): text to
// token ids and back, for the generate APIs' text_input / text_output. SentencePiece runs
// inside libkiln_spm_shim.so, loaded with its own symbol scope (spm_shim.cc says why); the
// shim is found at $KILN_SPM_SHIM, beside the running executable, or in the build tree.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kiln::server::generate {

class Tokenizer {
 public:
  // FAILED_PRECONDITION when the shim is missing (a build without libsentencepiece-dev) or
  // the file is not a SentencePiece model, saying which.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& model_file);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  absl::StatusOr<std::vector<int64_t>> Encode(std::string_view text) const;
  // INVALID_ARGUMENT for an id outside the vocabulary.
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids) const;
  int64_t vocab_size() const { return vocab_size_; }

  struct Api;  // the shim's functions

 private:
  Tokenizer() = default;
  const Api* api_ = nullptr;
  void* handle_ = nullptr;
  int64_t vocab_size_ = 0;
};

// The shim's path as Load looks for it ("" when none exists).
std::string TokenizerShimPath();

}  // namespace kiln::server::generate
