#include "server/common/json_log.h"

#include <spdlog/pattern_formatter.h>

#include <string>
#include <string_view>

#include "base/json.h"

namespace kiln::server {
namespace {

class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string quoted =
        json::Quote(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(quoted.data(), quoted.data() + quoted.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

std::unique_ptr<spdlog::formatter> JsonLineFormatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<JsonMessageFlag>('*').set_pattern(
      R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","thread":%t,"msg":%*})");
  return formatter;
}

}  // namespace kiln::server
