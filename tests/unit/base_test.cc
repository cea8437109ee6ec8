// base/: the heap settings of serving and of a model load (a multi-MiB buffer mapped on its
// own while serving, kept in the heap while a load runs, the serving values back after the
// last of overlapping loads), ReadWholeFile (regular files at their size, /proc files that report none, missing
// files), and kilnd's request for transparent huge pages (added to GLIBC_TUNABLES only where
// the kernel gives them on request, never twice, and never over the user's own).
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "base/file.h"
#include "base/heap_scope.h"
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

// Whether glibc served `p` by a mapping of its own: the IS_MMAPPED bit (0x2) of the chunk's
// size word, just before the pointer (glibc's chunk layout, stable since the 1990s).
// Not inlined: the compiler would see the read before a malloc result as out of bounds.
[[gnu::noinline]] bool MappedOnItsOwn(void* p) {
  return (static_cast<size_t*>(p)[-1] & 2u) != 0;
}

bool FourMiBIsMapped() {
  void* p = std::malloc(4 << 20);
  const bool mapped = MappedOnItsOwn(p);
  std::free(p);
  return mapped;
}

TEST(HeapScope, ALoadKeepsMultiMiBBuffersInTheHeapAndServingMapsThem) {
  SetServingHeap();
  EXPECT_TRUE(FourMiBIsMapped());
  {
    LoadHeapScope outer;
    EXPECT_FALSE(FourMiBIsMapped());
    {
      LoadHeapScope inner;  // overlapping loads: the first to end must not restore
      EXPECT_FALSE(FourMiBIsMapped());
    }
    EXPECT_FALSE(FourMiBIsMapped());
    void* big = std::malloc(64 << 20);  // above the load's threshold: still its own mapping
    EXPECT_TRUE(MappedOnItsOwn(big));
    std::free(big);
  }
  EXPECT_TRUE(FourMiBIsMapped());
}

}  // namespace
}  // namespace kiln
