#include "tests/cuda/host_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace kiln::testing {
namespace {

// The host translation unit: shim, prelude, kernels, and one thunk per kernel that unpacks
// the argument array.
std::string HostSource(const std::vector<codegen::Kernel>& kernels) {
  std::ostringstream s;
  s << "#include \"" << KILN_HOST_SHIM_HEADER << "\"\n";
  s << codegen::ModuleSource(kernels) << "\n";
  for (const codegen::Kernel& k : kernels) {
    s << "extern \"C\" void kiln_thunk_" << k.name << "(void* const* a) {\n  " << k.name << "(";
    for (size_t i = 0; i < k.params.size(); ++i) {
      const bool in = k.params[i].kind == codegen::KernelParam::Kind::kInput;
      s << (i ? ", " : "") << "(" << (in ? "const " : "") << k.param_types[i] << "*)a[" << i << "]";
    }
    s << ");\n}\n";
  }
  return s.str();
}

}  // namespace

std::string HostKernelDir() {
  const char* env = std::getenv("KILN_HOST_KERNEL_DIR");
  return env ? env : KILN_HOST_KERNEL_DEFAULT_DIR;
}

HostModule::~HostModule() {
  if (handle_) dlclose(handle_);
}

absl::StatusOr<std::unique_ptr<HostModule>> HostModule::Compile(
    const std::vector<codegen::Kernel>& kernels, const std::string& dir) {
  const std::string src = HostSource(kernels);
  std::filesystem::create_directories(dir);
  char tag[32];
  std::snprintf(tag, sizeof tag, "%016zx", std::hash<std::string>{}(src));
  const std::string base = dir + "/m_" + tag;
  if (!std::filesystem::exists(base + ".so")) {
    // Private file names, renamed into place: test processes running at once may compile
    // the same module.
    const std::string tmp = base + "." + std::to_string(getpid());
    std::ofstream(tmp + ".cc") << src;
    // -ffp-contract=off: no fused multiply-adds the device code would not have either way.
    const std::string cmd = std::string(KILN_HOST_CXX) + " -std=c++17 -O1 -fPIC -shared -w -ffp-contract=off -o " +
                            tmp + ".so " + tmp + ".cc > " + base + ".log 2>&1 && mv " + tmp + ".so " + base +
                            ".so && mv " + tmp + ".cc " + base + ".cc";
    if (std::system(cmd.c_str()) != 0) {
      return absl::InternalError("host compile failed: see " + base + ".log");
    }
  }
  auto m = std::unique_ptr<HostModule>(new HostModule);
  m->handle_ = dlopen((base + ".so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!m->handle_) return absl::InternalError(std::string("dlopen: ") + dlerror());
  m->launch_ = reinterpret_cast<decltype(m->launch_)>(dlsym(m->handle_, "kiln_shim_launch"));
  if (!m->launch_) return absl::InternalError("no kiln_shim_launch in " + base + ".so");
  return m;
}

absl::Status HostModule::Launch(const codegen::Kernel& k, const std::vector<void*>& args) const {
  auto thunk = reinterpret_cast<void (*)(void* const*)>(dlsym(handle_, ("kiln_thunk_" + k.name).c_str()));
  if (!thunk) return absl::NotFoundError("kernel " + k.name + " is not in this module");
  if (args.size() != k.params.size()) return absl::InvalidArgumentError("argument count");
  if (launch_(thunk, args.data(), static_cast<unsigned>(k.grid), static_cast<unsigned>(k.block),
              k.uses_barrier ? 1 : 0) != 0) {
    return absl::InternalError(k.name + ": threads of a block disagree on __syncthreads");
  }
  return absl::OkStatus();
}

absl::Status RunNodeKernels(const HostModule& m, const std::vector<codegen::Kernel>& kernels,
                            const Node& node, const std::vector<const Tensor*>& inputs,
                            std::vector<Tensor>& outs) {
  outs.resize(node.outputs.size());
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    const Value* v = node.outputs[o];
    if (!v || outs[o].defined()) continue;
    if (!v->shape || !IsStatic(*v->shape)) return absl::InvalidArgumentError("output shape");
    outs[o] = Tensor(v->dtype, StaticDims(*v->shape));
  }
  for (const codegen::Kernel& k : kernels) {
    std::vector<void*> args;
    for (const codegen::KernelParam& p : k.params) {
      if (p.kind == codegen::KernelParam::Kind::kOutput) {
        args.push_back(outs.at(p.index).raw_mutable());
      } else {
        const Tensor* t = inputs.at(p.index);
        if (!t) return absl::InvalidArgumentError("kernel reads an omitted input");
        args.push_back(const_cast<void*>(t->raw()));
      }
    }
    RETURN_IF_ERROR(m.Launch(k, args));
  }
  return absl::OkStatus();
}

}  // namespace kiln::testing
