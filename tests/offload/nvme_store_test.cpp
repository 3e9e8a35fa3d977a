// The nvme tier (offload/nvme_store.h): random bytes written at many offsets with many requests
// in flight, split into chunks, and waited for out of order read back the same through O_DIRECT,
// the page cache and the blocking fallback; the swap file lives exactly as long as the store; a
// dead process's swap file is reclaimed and a live one's kept; unusable directories and a disk
// too small are input errors naming the path.
#include "offload/nvme_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <vector>

#include "util/error.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

// A fresh directory under /tmp, removed with everything in it.
struct TempDir {
    TempDir() {
        char name[] = "/tmp/zt_nvme_store_XXXXXX";
        ZT_ASSERT(::mkdtemp(name) != nullptr, "mkdtemp: ", std::strerror(errno));
        path = name;
    }
    ~TempDir() {
        std::error_code ec;
        fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(path, ec);
    }
    std::string path;
};

struct Buffer {
    explicit Buffer(size_t n) : bytes(n), p(static_cast<std::byte*>(alloc_host_buffer(n))) {}
    ~Buffer() { free_host_buffer(p); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    size_t bytes;
    std::byte* p;
};

void fill_random(Buffer& b, unsigned seed) {
    std::mt19937 gen(seed);
    for (size_t i = 0; i < b.bytes; ++i) b.p[i] = static_cast<std::byte>(gen() & 0xff);
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInput) << e.what();
        return e.message();
    }
    return "";
}

void touch(const std::string& path) { std::ofstream(path) << "stale"; }

// Requests of 1 to 5 blocks at offsets spread over the store, some larger than the chunk, all
// issued before any is waited for, then waited for in a shuffled order; then read back the same
// way. Returns every byte of the store as read back.
std::vector<std::byte> round_trip(const NvmeStoreOptions& o, const std::vector<uint64_t>& offsets,
                                  const std::vector<size_t>& sizes) {
    NvmeStore s(o);
    std::mt19937 gen(7);
    std::vector<std::unique_ptr<Buffer>> in, out;
    std::vector<Store::Ticket> tickets;
    for (size_t i = 0; i < offsets.size(); ++i) {
        in.push_back(std::make_unique<Buffer>(sizes[i]));
        fill_random(*in.back(), static_cast<unsigned>(100 + i));
        tickets.push_back(s.write(offsets[i], in.back()->p, sizes[i]));
    }
    std::vector<size_t> order(tickets.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), gen);
    for (size_t i : order) s.wait(tickets[i]);

    tickets.clear();
    for (size_t i = 0; i < offsets.size(); ++i) {
        out.push_back(std::make_unique<Buffer>(sizes[i]));
        tickets.push_back(s.read(offsets[i], out.back()->p, sizes[i]));
    }
    std::shuffle(order.begin(), order.end(), gen);
    for (size_t i : order) s.wait(tickets[i]);
    for (size_t i = 0; i < offsets.size(); ++i)
        EXPECT_EQ(std::memcmp(in[i]->p, out[i]->p, sizes[i]), 0) << "request " << i;

    uint64_t total = 0;
    for (size_t n : sizes) total += n;
    EXPECT_EQ(s.stats().bytes_written, total);
    EXPECT_EQ(s.stats().bytes_read, total);
    EXPECT_GE(s.stats().wait_s, 0.0);

    Buffer all(static_cast<size_t>(s.capacity()));
    s.wait(s.read(0, all.p, all.bytes));
    return std::vector<std::byte>(all.p, all.p + all.bytes);
}

TEST(NvmeStore, EveryPathReadsBackWhatWasWritten) {
    TempDir dir;
    constexpr size_t kB = kStoreAlign;
    const uint64_t capacity = 64 * kB;
    // Disjoint ranges, not in order, some spanning several 2-block chunks.
    const std::vector<uint64_t> offsets = {40 * kB, 0, 9 * kB, 17 * kB, 3 * kB, 30 * kB, 50 * kB};
    const std::vector<size_t> sizes = {5 * kB, 3 * kB, 7 * kB, 1 * kB, 4 * kB, 9 * kB, 14 * kB};
    std::vector<std::byte> first;
    for (const bool direct : {true, false})
        for (const bool uring : {true, false})
            for (const bool single : {false, true}) {
                SCOPED_TRACE(str_cat("direct ", direct, " uring ", uring, " single ", single));
                NvmeStoreOptions o{dir.path, "rt", capacity, direct, uring, 3, single, 2 * kB};
                const std::vector<std::byte> got = round_trip(o, offsets, sizes);
                if (first.empty())
                    first = got;
                else
                    EXPECT_TRUE(got == first);
            }
    // Bytes never written read back as zeros (the file was allocated, not left with garbage).
    EXPECT_EQ(first[8 * kB], std::byte{0});
    EXPECT_EQ(first[20 * kB], std::byte{0});
    EXPECT_EQ(first[50 * kB - 1], std::byte{0});
    EXPECT_TRUE(fs::is_empty(dir.path));  // each store removed its file
}

TEST(NvmeStore, ReportsWhichPathsAreInEffect) {
    TempDir dir;
    NvmeStore s({dir.path, "paths", kStoreAlign, false, false});
    EXPECT_STREQ(s.tier(), "nvme");
    EXPECT_FALSE(s.direct());
    EXPECT_FALSE(s.uring());
    NvmeStore t({dir.path, "paths2", kStoreAlign});
    std::cout << "[ info     ] " << dir.path << ": O_DIRECT " << t.direct() << ", io_uring "
              << t.uring() << "\n";
}

TEST(NvmeStore, SwapFileIsSizedAndLivesAsLongAsTheStore) {
    TempDir dir;
    std::string path;
    {
        NvmeStore s({dir.path, "life", 3 * kStoreAlign + 1});
        path = s.path();
        EXPECT_EQ(path, nvme_swap_path(dir.path, "life"));
        EXPECT_EQ(fs::path(path).filename().string(),
                  "zerotrain-swap-" + std::to_string(::getpid()) + "-life.bin");
        EXPECT_EQ(s.capacity(), 4 * kStoreAlign);
        ASSERT_TRUE(fs::exists(path));
        EXPECT_EQ(fs::file_size(path), 4 * kStoreAlign);
        // A second store of this process under the same name is refused, and leaves the file.
        const std::string e = error_of([&] { NvmeStore twin({dir.path, "life", kStoreAlign}); });
        EXPECT_NE(e.find(path), std::string::npos) << e;
        EXPECT_TRUE(fs::exists(path));
    }
    EXPECT_FALSE(fs::exists(path));
}

TEST(NvmeStore, DestructorWaitsForRequestsInFlight) {
    TempDir dir;
    Buffer b(64 * kStoreAlign);
    fill_random(b, 3);
    {
        NvmeStore s({dir.path, "inflight", b.bytes, true, true, 4, false, kStoreAlign});
        s.write(0, b.p, b.bytes);  // never waited for
    }
    EXPECT_TRUE(fs::is_empty(dir.path));
}

TEST(NvmeStore, ReclaimsTheSwapFilesOfDeadProcessesOnly) {
    TempDir dir;
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) ::_exit(0);
    ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // reaped: its pid names no process now

    const auto swap = [&](const std::string& pid, const std::string& name) {
        return (fs::path(dir.path) / ("zerotrain-swap-" + pid + "-" + name + ".bin")).string();
    };
    const std::string dead_child = swap(std::to_string(child), "optimizer");
    const std::string dead_big = swap("999999999", "params");
    const std::string live = swap(std::to_string(::getpid()), "other");
    const std::string not_ours = (fs::path(dir.path) / "zerotrain-swap-notapid-x.bin").string();
    const std::string no_pid = (fs::path(dir.path) / "zerotrain-swap--x.bin").string();
    for (const std::string& p : {dead_child, dead_big, live, not_ours, no_pid}) touch(p);

    {  // the constructor reclaims
        NvmeStore s({dir.path, "new", kStoreAlign});
        EXPECT_FALSE(fs::exists(dead_child));
        EXPECT_FALSE(fs::exists(dead_big));
        EXPECT_TRUE(fs::exists(live));
        EXPECT_TRUE(fs::exists(not_ours));
        EXPECT_TRUE(fs::exists(no_pid));
    }
    touch(dead_child);
    touch(dead_big);
    EXPECT_EQ(NvmeStore::reclaim_stale(dir.path), 2);
    EXPECT_FALSE(fs::exists(dead_child));
    EXPECT_FALSE(fs::exists(dead_big));
    EXPECT_TRUE(fs::exists(live));
    EXPECT_EQ(NvmeStore::reclaim_stale(dir.path), 0);

    // A file whose pid looks dead but whose lock is held (a live run in another pid namespace)
    // is kept.
    touch(dead_big);
    const int fd = ::open(dead_big.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    const pid_t checker = ::fork();  // flock is per open file: ask from another process
    ASSERT_GE(checker, 0);
    if (checker == 0) ::_exit(NvmeStore::reclaim_stale(dir.path));
    int status = 0;
    ASSERT_EQ(::waitpid(checker, &status, 0), checker);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_TRUE(fs::exists(dead_big));
    ::close(fd);
    EXPECT_EQ(NvmeStore::reclaim_stale(dir.path), 1);
}

TEST(NvmeStore, UnusableDirectoriesAreInputErrorsNamingThePath) {
    TempDir dir;
    const std::string missing = dir.path + "/missing";
    std::string e = error_of([&] { NvmeStore s({missing, "x", kStoreAlign}); });
    EXPECT_NE(e.find(missing), std::string::npos) << e;
    EXPECT_NE(e.find("does not exist"), std::string::npos) << e;

    const std::string file = dir.path + "/file";
    touch(file);
    e = error_of([&] { NvmeStore s({file, "x", kStoreAlign}); });
    EXPECT_NE(e.find(file), std::string::npos) << e;
    EXPECT_NE(e.find("not a directory"), std::string::npos) << e;

    // A disk too small: the message says what is needed and what is free.
    const uint64_t huge = uint64_t{1} << 60;
    e = error_of([&] { NvmeStore s({dir.path, "huge", huge}); });
    EXPECT_NE(e.find(nvme_swap_path(dir.path, "huge")), std::string::npos) << e;
    EXPECT_NE(e.find(std::to_string(huge)), std::string::npos) << e;
    EXPECT_NE(e.find("bytes free"), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(nvme_swap_path(dir.path, "huge")));
}

TEST(NvmeStore, ReadOnlyDirectoryIsAnInputError) {
    // root passes access(W_OK) and may create files anyway: nothing to test there.
    if (::geteuid() == 0) GTEST_SKIP() << "running as root, which may write a 0555 directory";
    TempDir dir;
    const std::string ro = dir.path + "/ro";
    ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
    const std::string e = error_of([&] { NvmeStore s({ro, "x", kStoreAlign}); });
    EXPECT_NE(e.find(ro), std::string::npos) << e;
    EXPECT_NE(e.find("not writable"), std::string::npos) << e;
}

TEST(NvmeStore, RefusesRangesOutsideItAndUnalignedRequests) {
    TempDir dir;
    NvmeStore s({dir.path, "range", 2 * kStoreAlign});
    Buffer b(2 * kStoreAlign);
    EXPECT_THROW(s.read(2 * kStoreAlign, b.p, kStoreAlign), Error);
    EXPECT_THROW(s.read(kStoreAlign, b.p, 2 * kStoreAlign), Error);
    EXPECT_THROW(s.write(100, b.p, kStoreAlign), Error);
    EXPECT_THROW(s.write(0, b.p + 1, kStoreAlign), Error);
    EXPECT_THROW(s.wait(12345), Error);
    const Store::Ticket t = s.write(0, b.p, 0);  // empty: done at once
    s.wait(t);
    EXPECT_THROW(s.wait(t), Error);  // each ticket is waited for once
}

TEST(NvmeStore, FailedTransfersThrowAtWaitNamingFileAndOffset) {
    TempDir dir;
    NvmeStore s({dir.path, "fail", 4 * kStoreAlign, false, true, 2, false, kStoreAlign});
    Buffer b(2 * kStoreAlign);
    // Truncated behind the store's back: a read past the new end comes back short.
    ASSERT_EQ(::truncate(s.path().c_str(), static_cast<off_t>(kStoreAlign)), 0);
    const Store::Ticket ok = s.read(0, b.p, kStoreAlign);
    const Store::Ticket bad = s.read(2 * kStoreAlign, b.p + kStoreAlign, kStoreAlign);
    const std::string e = error_of([&] { s.wait(bad); });
    EXPECT_NE(e.find(s.path()), std::string::npos) << e;
    EXPECT_NE(e.find("offset " + std::to_string(2 * kStoreAlign)), std::string::npos) << e;
    s.wait(ok);  // the other request is unaffected
}

TEST(NvmeStore, FreeBytesIsThatOfTheFileSystem) {
    const fs::space_info si = fs::space("/tmp");
    const uint64_t f = nvme_free_bytes("/tmp");
    // Other processes write to this disk meanwhile: within 1 GiB.
    EXPECT_NEAR(static_cast<double>(f), static_cast<double>(si.available), double(1 << 30));
    EXPECT_THROW(nvme_free_bytes("/nonexistent/zt"), Error);
}

}  // namespace
}  // namespace zt
