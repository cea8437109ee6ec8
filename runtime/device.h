// The device strings of model configs and the tools: "reference", "cpu", "cuda" (GPU 0) and
// "cuda:N". Parsed here once; the backends (runtime/backend.h) serve the families, and a
// config is validated against this without linking any engine.
#pragma once

#include <cctype>
#include <optional>
#include <string>

namespace kiln::runtime {

enum class DeviceFamily { kReference, kCpu, kCuda };

struct Device {
  DeviceFamily family = DeviceFamily::kCpu;
  int index = 0;  // the GPU's ordinal (cuda); 0 otherwise
};

// nullopt for anything else (an index of more than three digits included).
inline std::optional<Device> ParseDevice(const std::string& name) {
  if (name == "reference") return Device{DeviceFamily::kReference, 0};
  if (name == "cpu") return Device{DeviceFamily::kCpu, 0};
  if (name == "cuda") return Device{DeviceFamily::kCuda, 0};
  if (name.rfind("cuda:", 0) != 0 || name.size() == 5 || name.size() > 8) return std::nullopt;
  int n = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
    n = n * 10 + (name[i] - '0');
  }
  return Device{DeviceFamily::kCuda, n};
}

}  // namespace kiln::runtime
