#include "runtime/cuda/cuda_libs.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <set>
#include <vector>

#include "runtime/cuda/library_search.h"

namespace kiln::cuda {
namespace {

template <class Api>
struct Library {
  absl::Status status;
  Api api;
  std::string file;                // the file that was opened
  std::vector<std::string> notes;  // companions that would not load, with the loader's message
};

struct Opened {
  void* handle = nullptr;
  std::string file, error;
  std::vector<std::string> notes;
};

// The path the loader resolved a handle to (a bare soname's included).
std::string LoadedFile(void* h, const std::string& fallback) {
  link_map* lm = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) return lm->l_name;
  return fallback;
}

// Libraries that `file` opens itself later (cuDNN 9's parts, NVRTC's builtins), opened now
// from its folder: a part that would not load is then reported with the loader's message
// here, instead of as a bare CUDNN_STATUS_* at the first call. The library's own dlopen by
// soname finds these already loaded.
void OpenCompanions(const std::string& file, const std::vector<std::string>& companions, Opened& o) {
  const std::string dir = file.substr(0, file.rfind('/') + 1);
  for (const std::string& c : companions) {
    const std::string path = dir.empty() || access((dir + c).c_str(), F_OK) != 0 ? c : dir + c;
    if (!dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) o.notes.push_back(c + ": " + dlerror());
  }
}

// The first candidate (library_search.h) that opens; python3 is asked only when the others
// failed. Without one: every loader message worth reading (files that exist but would not
// load, and the loader's own search), so the reason is never a bare "not found".
Opened OpenLibrary(const std::string& soname, const char* build_dir, const std::vector<std::string>& companions) {
  Opened o;
  std::set<std::string> tried;
  std::vector<std::string> failures;
  for (bool with_python : {false, true}) {
    for (const std::string& c : LibraryCandidates(soname, SearchFromEnvironment(build_dir, with_python))) {
      if (!tried.insert(c).second) continue;
      const bool bare = c.find('/') == std::string::npos;
      if (!bare && access(c.c_str(), F_OK) != 0) continue;
      if (void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL)) {
        o.handle = h;
        o.file = LoadedFile(h, c);
        OpenCompanions(o.file, companions, o);
        return o;
      }
      failures.push_back(dlerror());
    }
  }
  o.error = soname + " not found in KILN_CUDA_LIBRARY_PATH, the loader's path, python3's site-packages, the "
            "toolkit's or the driver's folders";
  for (const std::string& f : failures) o.error += "; " + f;
  return o;
}

// cuDNN 9's parts, in dependency order (graph first). NVRTC's builtins, which it opens when
// it compiles.
std::vector<std::string> CudnnParts() {
  const std::string v = ".so." + std::to_string(CUDNN_MAJOR);
  std::vector<std::string> parts;
  for (const char* p : {"graph", "ops", "cnn", "adv", "heuristic", "engines_precompiled", "engines_runtime_compiled"}) {
    parts.push_back(std::string("libcudnn_") + p + v);
  }
  return parts;
}
std::vector<std::string> NvrtcParts() {
  return {"libnvrtc-builtins.so." + std::to_string(CUDART_VERSION / 1000) + "." +
          std::to_string(CUDART_VERSION % 1000 / 10)};
}

// Opens `soname` for `lib` (its file and the loader's notes recorded): the handle, or null
// with lib.status saying why.
template <class Api>
void* OpenInto(Library<Api>& lib, const std::string& soname, const char* build_dir,
               const std::vector<std::string>& parts) {
  const Opened o = OpenLibrary(soname, build_dir, parts);
  lib.file = o.file;
  lib.notes = o.notes;
  if (!o.handle) lib.status = absl::FailedPreconditionError(o.error);
  return o.handle;
}

#define KILN_API_LOAD(f)                                                                  \
  lib.api.f = reinterpret_cast<decltype(lib.api.f)>(dlsym(h, #f));                        \
  if (!lib.api.f) {                                                                       \
    lib.status = absl::FailedPreconditionError(soname + " has no function " #f);          \
    return lib;                                                                           \
  }

Library<CudnnApi> OpenCudnn() {
  Library<CudnnApi> lib;
  const std::string soname = "libcudnn.so." + std::to_string(CUDNN_MAJOR);
  void* h = OpenInto(lib, soname, KILN_CUDNN_LIB_DIR, CudnnParts());
  if (!h) return lib;
  KILN_CUDNN_API(KILN_API_LOAD)
  return lib;
}

Library<CublasLtApi> OpenCublasLt() {
  Library<CublasLtApi> lib;
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* h = OpenInto(lib, soname, KILN_CUDA_LIB_DIR, {});
  if (!h) return lib;
  KILN_CUBLASLT_API(KILN_API_LOAD)
  return lib;
}

Library<NvrtcApi> OpenNvrtc() {
  Library<NvrtcApi> lib;
  // NVRTC's major is the CUDA major it ships with.
  const std::string soname = "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000);
  void* h = OpenInto(lib, soname, KILN_CUDA_LIB_DIR, NvrtcParts());
  if (!h) return lib;
  KILN_NVRTC_API(KILN_API_LOAD)
  return lib;
}

#undef KILN_API_LOAD

// Opened on first use, thread-safely; the handles stay open for the process.
const Library<CudnnApi>& CudnnLib() {
  static const auto* lib = new Library<CudnnApi>(OpenCudnn());
  return *lib;
}
const Library<CublasLtApi>& CublasLtLib() {
  static const auto* lib = new Library<CublasLtApi>(OpenCublasLt());
  return *lib;
}
const Library<NvrtcApi>& NvrtcLib() {
  static const auto* lib = new Library<NvrtcApi>(OpenNvrtc());
  return *lib;
}

template <class Api>
absl::StatusOr<const Api*> Result(const Library<Api>& lib) {
  if (!lib.status.ok()) return lib.status;
  return &lib.api;
}

}  // namespace

absl::StatusOr<const CudnnApi*> LoadCudnn() { return Result(CudnnLib()); }
absl::StatusOr<const CublasLtApi*> LoadCublasLt() { return Result(CublasLtLib()); }
absl::StatusOr<const NvrtcApi*> LoadNvrtc() { return Result(NvrtcLib()); }

absl::Status LoadCudaLibraries() {
  // NVRTC first: cuDNN's runtime-compiled engines link against it.
  RETURN_IF_ERROR(LoadNvrtc().status());
  RETURN_IF_ERROR(LoadCublasLt().status());
  return LoadCudnn().status();
}

absl::StatusOr<std::string> OpenLibraryFile(const std::string& soname) {
  const Opened o = OpenLibrary(soname, "", {});
  if (!o.handle) return absl::FailedPreconditionError(o.error);
  return o.file;
}

std::vector<LibraryOrigin> CudaLibraryOrigins() {
  return {{"nvrtc", NvrtcLib().file, NvrtcLib().notes},
          {"cudnn", CudnnLib().file, CudnnLib().notes},
          {"cublasLt", CublasLtLib().file, CublasLtLib().notes}};
}

const CudnnApi& Dnn() { return CudnnLib().api; }
const CublasLtApi& Lt() { return CublasLtLib().api; }
const NvrtcApi& Rtc() { return NvrtcLib().api; }

const CudnnApi* LoadedCudnn() { return CudnnLib().status.ok() ? &CudnnLib().api : nullptr; }
const NvrtcApi* LoadedNvrtc() { return NvrtcLib().status.ok() ? &NvrtcLib().api : nullptr; }

}  // namespace kiln::cuda
