#include "server/generate/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace kiln::server::generate {

struct Tokenizer::Api {
  void* (*load)(const char*, char*, int) = nullptr;
  void (*free)(void*) = nullptr;
  int (*vocab_size)(void*) = nullptr;
  int (*encode)(void*, const char*, int, int*, int, char*, int) = nullptr;
  int (*decode)(void*, const int*, int, char*, int, char*, int) = nullptr;
};

namespace {

constexpr char kShimName[] = "libkiln_spm_shim.so";

// The shim, opened once per process; the reason when it cannot be.
absl::StatusOr<const Tokenizer::Api*> OpenShim(const std::string& path);

std::string ExecutableDir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::filesystem::path(std::string(buf, static_cast<size_t>(n))).parent_path().string();
}

}  // namespace

std::string TokenizerShimPath() {
  if (const char* env = std::getenv("KILN_SPM_SHIM"); env && *env) return env;
  for (const std::string& dir : {ExecutableDir(), std::string(KILN_SPM_SHIM_BUILD_DIR)}) {
    const std::string p = (std::filesystem::path(dir) / kShimName).string();
    if (!dir.empty() && std::filesystem::exists(p)) return p;
  }
  return "";
}

namespace {

template <class F>
bool Bind(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  return f != nullptr;
}

absl::StatusOr<const Tokenizer::Api*> OpenShim(const std::string& path) {
  static std::mutex mu;
  static const Tokenizer::Api* api = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (api) return api;
  if (path.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        kShimName, " not found (this build has no SentencePiece: libsentencepiece-dev); set ",
        "KILN_SPM_SHIM to its path"));
  }
  // DEEPBIND: the library binds to its own protobuf, not to kilnd's (spm_shim.cc).
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!lib)
    return absl::FailedPreconditionError(absl::StrCat("cannot load ", path, ": ", dlerror()));
  auto* a = new Tokenizer::Api();
  if (!Bind(lib, "kiln_spm_load", a->load) || !Bind(lib, "kiln_spm_free", a->free) ||
      !Bind(lib, "kiln_spm_vocab_size", a->vocab_size) ||
      !Bind(lib, "kiln_spm_encode", a->encode) || !Bind(lib, "kiln_spm_decode", a->decode)) {
    delete a;
    return absl::FailedPreconditionError(absl::StrCat(path, " is not Kiln's tokenizer shim"));
  }
  api = a;  // kept for the process, as the library stays loaded
  return api;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& model_file) {
  ASSIGN_OR_RETURN(const Api* api, OpenShim(TokenizerShimPath()));
  char err[512] = {0};
  void* h = api->load(model_file.c_str(), err, sizeof err);
  if (!h) {
    return absl::FailedPreconditionError(
        absl::StrCat("tokenizer ", model_file, " is not a SentencePiece model: ", err));
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->api_ = api;
  t->handle_ = h;
  t->vocab_size_ = api->vocab_size(h);
  return t;
}

Tokenizer::~Tokenizer() {
  if (handle_) api_->free(handle_);
}

absl::StatusOr<std::vector<int64_t>> Tokenizer::Encode(std::string_view text) const {
  if (text.size() > static_cast<size_t>(INT_MAX / 2)) {
    return absl::InvalidArgumentError("the text is too long to tokenize");
  }
  // Usually at most one piece per byte (plus a leading space marker); normalization can
  // make more, and then the count the shim returns sizes a second call.
  char err[512] = {0};
  for (size_t cap = text.size() + 2;;) {
    std::vector<int> ids(cap);
    const int n = api_->encode(handle_, text.data(), static_cast<int>(text.size()), ids.data(),
                               static_cast<int>(cap), err, sizeof err);
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat("cannot tokenize the text: ", err));
    if (static_cast<size_t>(n) <= cap) return std::vector<int64_t>(ids.begin(), ids.begin() + n);
    cap = static_cast<size_t>(n);
  }
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int64_t>& ids) const {
  std::vector<int> in;
  in.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", id, " is outside the tokenizer's vocabulary [0, ", vocab_size_, ")"));
    }
    in.push_back(static_cast<int>(id));
  }
  char err[512] = {0};
  for (size_t cap = 64 + 16 * ids.size();; cap *= 2) {
    std::string out(cap, '\0');
    const int n = api_->decode(handle_, in.data(), static_cast<int>(in.size()), out.data(),
                               static_cast<int>(cap), err, sizeof err);
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat("cannot decode the ids: ", err));
    if (static_cast<size_t>(n) <= cap) {
      out.resize(static_cast<size_t>(n));
      return out;
    }
  }
}

}  // namespace kiln::server::generate
