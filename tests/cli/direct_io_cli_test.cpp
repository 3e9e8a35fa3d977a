// checkpoint.direct_io decides whether shards go around the page cache (docs/checkpoints.md,
// "I/O"): a shard written with O_DIRECT leaves none of its pages cached, one written through the
// page cache leaves pages there (clean, after the fsync). Residency is read with mincore. The run
// is made on a disk-backed file system (the build directory), not in /tmp: tmpfs keeps every page
// in memory whatever the flags (and refuses O_DIRECT before Linux 6.6); where the build directory
// cannot take O_DIRECT either, the test skips and says why.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
namespace fs = std::filesystem;

namespace {

// The share of a file's pages in the page cache now.
double cached_share(const fs::path& p) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0) << p;
    const size_t bytes = fs::file_size(p), page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);  // maps, faults nothing
    std::vector<unsigned char> in((bytes + page - 1) / page);
    EXPECT_EQ(::mincore(m, bytes, in.data()), 0);
    ::munmap(m, bytes);
    ::close(fd);
    return static_cast<double>(
               std::count_if(in.begin(), in.end(), [](unsigned char c) { return c & 1; })) /
           static_cast<double>(in.size());
}

// A fresh directory beside the zerotrain binary, removed at the end.
struct DiskDir {
    fs::path path =
        fs::path(ZT_BINARY).parent_path() / ("zt_direct_io_test_" + std::to_string(::getpid()));
    DiskDir() {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~DiskDir() { fs::remove_all(path); }
};

}  // namespace

TEST_F(Cli, DirectIoKeyDecidesWhetherShardsBypassThePageCache) {
    DiskDir disk;
    struct statfs sf {};
    ASSERT_EQ(::statfs(disk.path.c_str(), &sf), 0) << std::strerror(errno);
    if (sf.f_type == TMPFS_MAGIC)
        GTEST_SKIP() << disk.path << " is on tmpfs, where every page stays in memory whatever "
                     << "O_DIRECT says; build on a disk to run this test";
    {
        const int fd = ::open((disk.path / "probe").c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
        if (fd < 0)
            GTEST_SKIP() << disk.path << " does not take O_DIRECT (" << std::strerror(errno)
                         << "); build on a file system that does to run this test";
        ::close(fd);
    }
    nlohmann::json j = tiny();
    j["steps"] = 4;
    j.erase("eval_interval");
    j["checkpoint"] = {{"interval_steps", 4}};
    for (bool direct : {true, false}) {
        j["checkpoint"]["direct_io"] = direct;
        const fs::path run = disk.path / (direct ? "direct" : "buffered");
        const auto r = zt::testing::run_zerotrain("train " + write_config(j) +
                                                  " --quiet --run-dir " + run.string());
        ASSERT_EQ(r.code, 0) << r.output;
        const double share =
            cached_share(run / "checkpoints" / "step_00000004" / "rank_00000.safetensors");
        if (direct)
            EXPECT_EQ(share, 0.0) << "an O_DIRECT shard left pages in the page cache";
        else  // how many stay depends on memory pressure; none would mean mincore sees nothing
            EXPECT_GT(share, 0.0) << "a buffered shard left no page in the page cache";
    }
}
