// kilnd's JSON log lines stay one valid object whatever the message holds.
#include <gtest/gtest.h>
#include <spdlog/details/log_msg.h>

#include "base/json.h"
#include "server/common/json_log.h"

namespace kiln::server {
namespace {

std::string Line(std::string_view message) {
  const auto formatter = JsonLineFormatter();
  spdlog::details::log_msg msg(spdlog::source_loc{}, "kilnd", spdlog::level::warn,
                               spdlog::string_view_t(message.data(), message.size()));
  spdlog::memory_buf_t out;
  formatter->format(msg, out);
  return std::string(out.data(), out.size());
}

TEST(JsonLog, AMessageWithQuotesNewlinesAndControlsIsOneObject) {
  const std::string message = "model \"a\\b\" failed:\nline two\t\x01 end";
  std::string line = Line(message);
  ASSERT_FALSE(line.empty());
  ASSERT_EQ(line.back(), '\n');
  line.pop_back();
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;  // one line
  auto v = json::Parse(line);
  ASSERT_TRUE(v.ok()) << v.status() << "\n" << line;
  ASSERT_NE(v->Find("msg"), nullptr);
  EXPECT_EQ(v->Find("msg")->text(), message);
  EXPECT_EQ(v->Find("level")->text(), "warning");
  EXPECT_EQ(v->Find("thread")->kind(), json::Kind::kNumber);
  EXPECT_EQ(v->Find("time")->kind(), json::Kind::kString);
}

TEST(JsonLog, APlainMessageIsUnchanged) {
  std::string line = Line("READY");
  auto v = json::Parse(line.substr(0, line.size() - 1));
  ASSERT_TRUE(v.ok()) << line;
  EXPECT_EQ(v->Find("msg")->text(), "READY");
}

}  // namespace
}  // namespace kiln::server
