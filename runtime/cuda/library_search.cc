#include "runtime/cuda/library_search.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>

namespace kiln::cuda {
namespace {

std::vector<std::string> SplitPath(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ':')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// Where pip wheels (CUDA 13's nvidia-*-cu13 put every library in nvidia/cu13/lib; cuDNN's
// wheel keeps nvidia/cudnn/lib; older wheels one folder per library) and PyTorch
// (torch/lib, for a build that bundles its libraries) keep them under one site-packages.
const char* const kPythonSubdirs[] = {"nvidia/cu13/lib", "nvidia/cudnn/lib", "nvidia/cublas/lib",
                                      "nvidia/cuda_nvrtc/lib", "torch/lib"};

const char* const kToolkitDirs[] = {"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
                                    "/usr/local/cuda/targets/sbsa-linux/lib", "/usr/lib/x86_64-linux-gnu",
                                    "/usr/lib/aarch64-linux-gnu", "/usr/lib64"};

const char* const kDriverDirs[] = {"/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/wsl/lib"};

}  // namespace

std::vector<std::string> LibraryCandidates(const std::string& soname, const LibrarySearch& s) {
  std::vector<std::string> dirs = SplitPath(s.override_path);
  const size_t bare_at = dirs.size();
  for (const std::string& site : s.python_site_dirs) {
    for (const char* sub : kPythonSubdirs) dirs.push_back(site + "/" + sub);
  }
  if (!s.cuda_home.empty()) {
    dirs.push_back(s.cuda_home + "/lib64");
    dirs.push_back(s.cuda_home + "/lib");
  }
  for (const char* d : kToolkitDirs) dirs.push_back(d);
  if (!s.build_dir.empty()) dirs.push_back(s.build_dir);
  for (const char* d : kDriverDirs) dirs.push_back(d);

  std::vector<std::string> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < dirs.size(); ++i) {
    if (i == bare_at) out.push_back(soname);
    std::string d = dirs[i];
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    if (seen.insert(d).second) out.push_back(d + "/" + soname);
  }
  if (bare_at == dirs.size()) out.push_back(soname);
  return out;
}

std::vector<std::string> PythonSiteDirs() {
  // sys.prefix-relative and user site-packages alike; stderr dropped, so a machine without
  // python3 gives an empty list.
  const char* cmd =
      "python3 -c 'import site, sys; print(\"\\n\".join(site.getsitepackages() + [site.getusersitepackages()]))' "
      "2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd, "r"), pclose);
  std::vector<std::string> dirs;
  if (!p) return dirs;
  char line[4096];
  while (std::fgets(line, sizeof line, p.get())) {
    std::string d(line);
    while (!d.empty() && (d.back() == '\n' || d.back() == '\r')) d.pop_back();
    if (!d.empty() && d[0] == '/') dirs.push_back(d);
  }
  return dirs;
}

LibrarySearch SearchFromEnvironment(const std::string& build_dir, bool with_python) {
  LibrarySearch s;
  s.override_path = Env("KILN_CUDA_LIBRARY_PATH");
  s.cuda_home = Env("CUDA_HOME");
  if (s.cuda_home.empty()) s.cuda_home = Env("CUDA_PATH");
  s.build_dir = build_dir;
  if (with_python) s.python_site_dirs = PythonSiteDirs();
  return s;
}

}  // namespace kiln::cuda
