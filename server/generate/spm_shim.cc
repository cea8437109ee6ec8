// libkiln_spm_shim.so: SentencePiece behind a C interface, for server/generate/tokenizer.cc.
// Debian 12's libsentencepiece carries its own protobuf 3.14 runtime, which aborts beside the
// protobuf 3.21 that kilnd links ("compiled against version 3.14.0"); kilnd therefore never
// links it, and loads this shim with RTLD_LOCAL | RTLD_DEEPBIND, so the library binds to its
// own protobuf and kilnd to its. Nothing but plain C types crosses this boundary.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace {

void CopyError(const std::string& text, char* err, int err_len) {
  if (err == nullptr || err_len <= 0) return;
  std::strncpy(err, text.c_str(), static_cast<size_t>(err_len) - 1);
  err[err_len - 1] = '\0';
}

sentencepiece::SentencePieceProcessor* Processor(void* h) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(h);
}

}  // namespace

extern "C" {

// A processor for the model file at `path`, or null with the reason in `err`.
void* kiln_spm_load(const char* path, char* err, int err_len) {
  auto* p = new sentencepiece::SentencePieceProcessor();
  const auto st = p->Load(path);
  if (!st.ok()) {
    CopyError(st.ToString(), err, err_len);
    delete p;
    return nullptr;
  }
  return p;
}

void kiln_spm_free(void* h) { delete Processor(h); }

int kiln_spm_vocab_size(void* h) { return Processor(h)->GetPieceSize(); }

// The ids of `text`; their count (at most `cap` written), or -1 with the reason in `err`.
int kiln_spm_encode(void* h, const char* text, int len, int* ids, int cap, char* err, int err_len) {
  std::vector<int> out;
  const auto st = Processor(h)->Encode(std::string(text, static_cast<size_t>(len)), &out);
  if (!st.ok()) {
    CopyError(st.ToString(), err, err_len);
    return -1;
  }
  for (size_t i = 0; i < out.size() && static_cast<int>(i) < cap; ++i) ids[i] = out[i];
  return static_cast<int>(out.size());
}

// The text of `ids`: its length in bytes (at most `cap` written), or -1 with the reason.
int kiln_spm_decode(void* h, const int* ids, int n, char* text, int cap, char* err, int err_len) {
  std::string out;
  const auto st = Processor(h)->Decode(std::vector<int>(ids, ids + n), &out);
  if (!st.ok()) {
    CopyError(st.ToString(), err, err_len);
    return -1;
  }
  std::memcpy(text, out.data(), std::min(out.size(), static_cast<size_t>(cap)));
  return static_cast<int>(out.size());
}

}  // extern "C"
