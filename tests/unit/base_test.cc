// base/: ReadWholeFile (regular files at their size, /proc files that report none, missing
// files), and kilnd's request for transparent huge pages (added to GLIBC_TUNABLES only where
// the kernel gives them on request, never twice, and never over the user's own).
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "base/file.h"
#include "base/huge_pages.h"

namespace kiln {
namespace {

constexpr char kMadvise[] = "always [madvise] never";

TEST(ReadWholeFile, ReadsRegularProcAndEmptyFilesAndRefusesMissingOnes) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "kiln_base_test";
  std::filesystem::create_directories(dir);
  std::string bytes(300000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 31);
  std::ofstream(dir / "data", std::ios::binary) << bytes;
  std::ofstream(dir / "empty", std::ios::binary);
  EXPECT_EQ(ReadWholeFile((dir / "data").string()), bytes);
  EXPECT_EQ(ReadWholeFile((dir / "empty").string()), "");
  EXPECT_EQ(ReadWholeFile((dir / "missing").string()), std::nullopt);
  // /proc reports a size of 0 and refuses seeking to the end; it is read all the same.
  const std::optional<std::string> comm = ReadWholeFile("/proc/self/comm");
  ASSERT_TRUE(comm.has_value());
  EXPECT_FALSE(comm->empty());
  EXPECT_EQ(comm->back(), '\n');
  std::filesystem::remove_all(dir);
}

TEST(HugePageTunables, AddedWhereTheKernelGivesThemOnRequest) {
  EXPECT_EQ(HugePageTunables(nullptr, kMadvise), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(HugePageTunables("", kMadvise), "glibc.malloc.hugetlb=1");
  // The user's other tunables are kept.
  EXPECT_EQ(HugePageTunables("glibc.malloc.arena_max=2", kMadvise),
            "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1");
}

TEST(HugePageTunables, LeftAloneOtherwise) {
  EXPECT_EQ(HugePageTunables(nullptr, "[always] madvise never"), std::nullopt);  // no need
  EXPECT_EQ(HugePageTunables(nullptr, "always madvise [never]"), std::nullopt);  // no use
  EXPECT_EQ(HugePageTunables(nullptr, ""), std::nullopt);  // no THP in this kernel
  // Set already: by the user (either way), or by kilnd before its re-execution.
  EXPECT_EQ(HugePageTunables("glibc.malloc.hugetlb=0", kMadvise), std::nullopt);
  EXPECT_EQ(HugePageTunables("glibc.malloc.hugetlb=1", kMadvise), std::nullopt);
}

}  // namespace
}  // namespace kiln
