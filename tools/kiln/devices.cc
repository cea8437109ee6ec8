// kiln devices [--json]: what Kiln can use on this machine. The CPU's vector ISA (as the CPU
// engine runs it), whether the CUDA backend is compiled in, the CUDA libraries' versions (or
// which could not be opened, and why), and the GPUs found, or why there are none.
#include "runtime/cuda/devices.h"

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "base/json.h"
#include "runtime/cpu/isa.h"
#include "tools/kiln/commands.h"

namespace kiln::tools {
namespace {

std::string Or(const std::string& s, const char* dflt) { return s.empty() ? dflt : s; }

void PrintText(const cpu::IsaReport& isa, const cuda::CudaReport& c) {
  std::printf("cpu: %s (detected %s%s%s; oneDNN %s), %u hardware threads\n", cpu::IsaName(isa.active),
              cpu::IsaName(isa.detected), isa.cap.empty() ? "" : ", capped by ", isa.cap.c_str(),
              isa.onednn.c_str(), std::thread::hardware_concurrency());
  if (!c.compiled) {
    std::printf("cuda: not compiled in: %s\n", c.why_none.c_str());
    return;
  }
  std::printf("cuda: compiled in (toolkit %s; runtime %s, driver %s; NVRTC %s, cuDNN %s, cuBLAS %s)\n",
              c.toolkit.c_str(), Or(c.runtime, "?").c_str(), Or(c.driver, "none").c_str(), Or(c.nvrtc, "?").c_str(),
              Or(c.cudnn, "?").c_str(), Or(c.cublas, "?").c_str());
  for (const auto& [name, file] : c.library_files) std::printf("  %s: %s\n", name.c_str(), file.c_str());
  for (const std::string& m : c.missing) std::printf("  missing library: %s\n", m.c_str());
  for (const std::string& n : c.library_notes) std::printf("  library part not loaded: %s\n", n.c_str());
  for (const cuda::GpuInfo& g : c.gpus) {
    std::printf("  cuda:%d  %s  sm_%d%d  %.1f GiB  %d SMs\n", g.index, g.name.c_str(), g.cc_major, g.cc_minor,
                static_cast<double>(g.memory_bytes) / (1 << 30), g.multiprocessors);
  }
  if (c.gpus.empty()) std::printf("  no GPU: %s\n", c.why_none.c_str());
}

void WriteGpus(json::Writer& w, const cuda::CudaReport& c) {
  w.Key("gpus");
  w.BeginArray();
  for (const cuda::GpuInfo& g : c.gpus) {
    w.BeginObject();
    w.Field("device", "cuda:" + std::to_string(g.index));
    w.Field("name", g.name);
    w.Field("compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor));
    w.Field("memory_bytes", g.memory_bytes);
    w.Field("multiprocessors", static_cast<int64_t>(g.multiprocessors));
    w.EndObject();
  }
  w.EndArray();
}

void PrintJson(const cpu::IsaReport& isa, const cuda::CudaReport& c) {
  json::Writer w(json::NonFinite::kNull);
  w.BeginObject();
  w.Key("cpu");
  w.BeginObject();
  w.Field("isa", cpu::IsaName(isa.active));
  w.Field("detected", cpu::IsaName(isa.detected));
  w.Field("cap", isa.cap);
  w.Field("onednn", isa.onednn);
  w.Field("hardware_threads", static_cast<int64_t>(std::thread::hardware_concurrency()));
  w.EndObject();
  w.Key("cuda");
  w.BeginObject();
  w.Key("compiled");
  w.Bool(c.compiled);
  w.Field("toolkit", c.toolkit);
  w.Field("runtime", c.runtime);
  w.Field("driver", c.driver);
  w.Field("nvrtc", c.nvrtc);
  w.Field("cudnn", c.cudnn);
  w.Field("cublas", c.cublas);
  w.Key("missing");
  w.BeginArray();
  for (const std::string& m : c.missing) w.String(m);
  w.EndArray();
  w.Key("library_files");
  w.BeginObject();
  for (const auto& [name, file] : c.library_files) w.Field(name, file);
  w.EndObject();
  w.Key("library_notes");
  w.BeginArray();
  for (const std::string& n : c.library_notes) w.String(n);
  w.EndArray();
  WriteGpus(w, c);
  w.Field("why_none", c.gpus.empty() ? c.why_none : "");
  w.EndObject();
  w.EndObject();
  std::printf("%s\n", w.text().c_str());
}

}  // namespace

int DevicesCommand(const std::vector<std::string>& args) {
  bool json = false;
  for (const std::string& a : args) {
    if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "kiln devices: unknown argument %s (usage: kiln devices [--json])\n", a.c_str());
      return 2;
    }
  }
  const cpu::IsaReport& isa = cpu::CpuIsa();
  const cuda::CudaReport& c = cuda::ProbeCuda();
  if (json) {
    PrintJson(isa, c);
  } else {
    PrintText(isa, c);
  }
  return 0;
}

}  // namespace kiln::tools
