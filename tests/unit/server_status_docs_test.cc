// The status table of docs/server.md ("Status codes") is what clients are told to expect.
// Every code that the server, compiler, runtime or base code creates (absl::<Code>Error) must
// have its row there, so a new code cannot reach clients undocumented; the few that never
// leave the process are listed here with the reason.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>

#include "base/file.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// absl's constructor name -> the code's name as gRPC and the table spell it.
std::string CodeName(const std::string& camel) {
  std::string out;
  for (char c : camel) {
    if (std::isupper(static_cast<unsigned char>(c)) && !out.empty()) out += '_';
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return out;
}

// Code -> one file that creates it.
std::map<std::string, std::string> CreatedCodes(const fs::path& source) {
  const std::regex error(R"(absl::([A-Z][A-Za-z]+)Error\()");
  std::map<std::string, std::string> codes;
  for (const char* dir : {"server", "compiler", "runtime", "ops", "base"}) {
    if (!fs::exists(source / dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(source / dir)) {
      const std::string name = e.path().filename().string();
      const std::string ext = e.path().extension().string();
      if ((ext != ".cc" && ext != ".h") || name.find("_test") != std::string::npos) continue;
      const std::string text = ReadWholeFile(e.path().string()).value_or("");
      for (std::sregex_iterator it(text.begin(), text.end(), error), end; it != end; ++it) {
        codes.emplace(CodeName((*it)[1]), fs::relative(e.path(), source).string());
      }
    }
  }
  return codes;
}

// The codes in the first column of the table after "Status codes".
std::set<std::string> DocumentedCodes(const std::string& doc) {
  std::set<std::string> codes;
  const size_t start = doc.find("Status codes (");
  const size_t end = doc.find("\n\n", doc.find("| code |", start));
  const std::regex row(R"(\n\| ([A-Z_ /]+) \|)");
  const std::string table = doc.substr(start, end - start);
  for (std::sregex_iterator it(table.begin(), table.end(), row), e; it != e; ++it) {
    const std::string cell = (*it)[1];
    for (size_t at = 0; at < cell.size();) {  // "UNAUTHENTICATED / PERMISSION_DENIED"
      const size_t slash = cell.find(" / ", at);
      codes.insert(cell.substr(at, slash == std::string::npos ? std::string::npos : slash - at));
      at = slash == std::string::npos ? cell.size() : slash + 3;
    }
  }
  return codes;
}

TEST(StatusDocs, EveryCodeTheServerCreatesIsDocumented) {
  const char* env = std::getenv("KILN_SOURCE_DIR");
  ASSERT_NE(env, nullptr) << "KILN_SOURCE_DIR is not set";
  const fs::path source(env);
  const std::set<std::string> documented =
      DocumentedCodes(ReadWholeFile((source / "docs" / "server.md").string()).value_or(""));
  ASSERT_GT(documented.size(), 5u) << "the status table was not found";
  // Created, but never returned to a client.
  const std::map<std::string, std::string> internal = {
      {"ALREADY_EXISTS", "RegisterTestPass, a test-only hook"},
      {"UNKNOWN", "model_builder's placeholder, replaced before it is read"},
  };
  for (const auto& [code, file] : CreatedCodes(source)) {
    if (internal.count(code)) continue;
    EXPECT_TRUE(documented.count(code))
        << code << " (created in " << file << ") has no row in docs/server.md's status table";
  }
}

}  // namespace
}  // namespace kiln
