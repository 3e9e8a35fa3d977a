// Direct I/O (checkpoint/direct_io.h): every combination of O_DIRECT or the page cache, io_uring
// or blocking calls, and queue depth writes exactly the bytes appended (sizes around the
// alignment and the chunk, appends that straddle chunks) with the right CRC-32C, and streams them
// back in order; errors name the file. Shards read through small chunks copy ranges that cross
// chunk boundaries, and a damaged header is reported as corruption.
#include "checkpoint/direct_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoint/shards.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

constexpr size_t kChunk = 2 * kDirectIoAlign;  // small, so that files span many chunks

fs::path test_dir() {
    fs::path d = fs::temp_directory_path() / ("zt_direct_io_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
}

std::vector<std::byte> pattern(size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::vector<std::byte> v(n);
    for (auto& b : v) b = static_cast<std::byte>(gen() & 0xff);
    return v;
}

std::vector<std::byte> file_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(c.size());
    if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());  // never memcpy from null
    return out;
}

// Whether this file system takes O_DIRECT at all (tmpfs before Linux 6.6 does not).
bool fs_takes_o_direct(const fs::path& dir) {
    const fs::path p = dir / "probe";
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd >= 0) ::close(fd);
    fs::remove(p);
    return fd >= 0;
}

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.message();
    }
    return "";
}

}  // namespace

TEST(DirectIo, WritesAndStreamsBackExactlyInEveryMode) {
    const fs::path dir = test_dir();
    const bool can_direct = fs_takes_o_direct(dir);
    const std::vector<size_t> sizes = {0,
                                       1,
                                       7,
                                       kDirectIoAlign - 1,
                                       kDirectIoAlign,
                                       kDirectIoAlign + 1,
                                       kChunk - 1,
                                       kChunk,
                                       kChunk + 1,
                                       3 * kChunk + 5,
                                       7 * kChunk + kDirectIoAlign};
    for (bool direct : {true, false})
        for (bool uring : {true, false})
            for (int depth : {1, 2, 3})
                for (size_t n : sizes) {
                    SCOPED_TRACE(testing::Message() << "direct " << direct << " uring " << uring
                                                    << " depth " << depth << " bytes " << n);
                    const DirectIoOptions o{direct, uring, kChunk, depth};
                    const std::vector<std::byte> data = pattern(n, static_cast<unsigned>(n));
                    const fs::path p = dir / "f.bin";
                    DirectFileWriter w(p.string(), o);
                    // Appends of 1, 1000, 5000, ... bytes: some inside a chunk, some across two.
                    for (size_t at = 0, piece = 1; at < n; piece = piece * 5 + 995) {
                        const size_t len = std::min(piece, n - at);
                        w.append(data.data() + at, len);
                        at += len;
                    }
                    const WrittenFile wf = w.finish();
                    EXPECT_EQ(wf.bytes, n);
                    EXPECT_EQ(wf.crc32c, crc32c(data.data(), n));
                    EXPECT_EQ(w.report().direct, direct && can_direct);
                    EXPECT_EQ(file_bytes(p), data);

                    std::vector<std::byte> back;
                    const DirectIoReport r = read_file_sequential(
                        p.string(), n,
                        [&](uint64_t off, std::span<const std::byte> c) {
                            EXPECT_EQ(off, back.size());
                            EXPECT_LE(c.size(), kChunk);
                            back.insert(back.end(), c.begin(), c.end());
                        },
                        o);
                    EXPECT_EQ(back, data);
                    EXPECT_EQ(r.direct, direct && can_direct);
                }
    fs::remove_all(dir);
}

TEST(DirectIo, ErrorsNameTheFile) {
    const fs::path dir = test_dir();
    const std::string missing = (dir / "no" / "such" / "dir" / "f.bin").string();
    EXPECT_NE(error_of([&] { DirectFileWriter w(missing); }).find("cannot create " + missing),
              std::string::npos);
    // A file shorter than the caller expects (a truncated shard) is named, in every mode.
    const fs::path p = dir / "short.bin";
    const std::vector<std::byte> data = pattern(3 * kChunk + 11, 3);
    {
        DirectFileWriter w(p.string());
        w.append(data.data(), data.size());
        w.finish();
    }
    for (bool direct : {true, false})
        for (bool uring : {true, false}) {
            const std::string e = error_of([&] {
                read_file_sequential(p.string(), data.size() + 1,
                                     [](uint64_t, std::span<const std::byte>) {},
                                     {direct, uring, kChunk, 2});
            });
            EXPECT_NE(e.find(p.string()), std::string::npos) << e;
            EXPECT_NE(e.find("truncated"), std::string::npos) << e;
        }
    // A full disk: /dev/full refuses every write with ENOSPC, through the ring or not.
    if (fs::exists("/dev/full"))
        for (bool uring : {true, false}) {
            const std::string e = error_of([&] {
                DirectFileWriter w("/dev/full", {true, uring, kChunk, 2});
                w.append(data.data(), data.size());
                w.finish();
            });
            EXPECT_NE(e.find("cannot write /dev/full: No space left on device"), std::string::npos)
                << e;
        }
    fs::remove_all(dir);
}

TEST(DirectIo, ShardRangesAcrossChunksAndHeaderDamage) {
    const fs::path dir = test_dir();
    const DirectIoOptions small{true, true, kDirectIoAlign, 2};
    const int64_t n = 5000;  // 20 kB per tensor: each spans several 4 KiB chunks
    std::vector<float> master(2 * n), avg(2 * n);
    for (int64_t i = 0; i < 2 * n; ++i) {
        master[i] = static_cast<float>(i) * 0.5f;
        avg[i] = -static_cast<float>(i);
    }
    Manifest m;
    m.numel = 2 * n - 3;  // the last 3 elements are padding and read as 0
    m.tensors = {"master", "exp_avg"};
    for (int r = 0; r < 2; ++r)
        m.files.push_back(write_shard(dir.string(), r, r * n, r * n + n, {"master", "exp_avg"},
                                      {master.data() + r * n, avg.data() + r * n}, small));
    ShardReader reader(dir.string(), m, small);
    std::vector<float> a(2 * n, 1.0f), b(1500, 1.0f);
    reader.add("master", 0, 2 * n, a.data());
    reader.add("exp_avg", n - 700, n + 800, b.data());  // across the two shards
    reader.run();
    for (int64_t i = 0; i < 2 * n; ++i) ASSERT_EQ(a[i], i < m.numel ? master[i] : 0.0f) << i;
    for (int64_t i = 0; i < 1500; ++i) ASSERT_EQ(b[i], avg[n - 700 + i]) << i;

    // A byte of the JSON header changed: the CRC names the file as corrupted, before the header.
    const fs::path f0 = dir / m.files[0].file;
    {
        std::fstream f(f0, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(9);
        f.put('#');
    }
    const std::string e = error_of([&] { reader.read("master", 0, 10, a.data()); });
    EXPECT_NE(e.find(f0.string() + " is corrupted"), std::string::npos) << e;
    fs::remove_all(dir);
}

}  // namespace zt
