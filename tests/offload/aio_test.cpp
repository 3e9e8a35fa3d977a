// The shared I/O queue (offload/aio.h): on io_uring and on the blocking fallback, every prepared
// transfer comes back exactly once under its tag with the bytes it moved, and the bytes on disk
// are the same; a read past the end is short, not an error; a buffer is aligned as promised.
#include "offload/aio.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>

namespace zt {
namespace {

namespace fs = std::filesystem;

TEST(AioQueue, EveryTransferComesBackOnceUnderItsTagOnBothPaths) {
    const fs::path path =
        fs::temp_directory_path() / ("zt_aio_test_" + std::to_string(::getpid()) + ".bin");
    constexpr unsigned kDepth = 4;
    constexpr size_t kN = kAioAlign;
    AlignedBuffer out = alloc_aligned_buffer(2 * kDepth * kN, "test");
    AlignedBuffer in = alloc_aligned_buffer(2 * kDepth * kN, "test");
    for (size_t i = 0; i < 2 * kDepth * kN; ++i) out.get()[i] = static_cast<std::byte>(i * 13 + 5);
    for (const bool uring : {true, false}) {
        SCOPED_TRACE(uring ? "io_uring" : "blocking");
        bool direct = false;
        const int fd =
            open_maybe_direct(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, true, &direct);
        ASSERT_GE(fd, 0);
        AioQueue q(kDepth, uring, path);
        if (!uring) {
            EXPECT_FALSE(q.uring());
        }
        // Two rounds of kDepth writes, the second reusing the tags' slots once the first is back.
        for (size_t round = 0; round < 2; ++round) {
            for (unsigned t = 0; t < kDepth; ++t) {
                const size_t k = round * kDepth + t;
                q.prepare(fd, AioOp::kWrite, out.get() + k * kN, kN, k * kN, 100 + k);
            }
            EXPECT_EQ(q.in_flight(), kDepth);
            q.submit();
            std::set<uint64_t> tags;
            for (unsigned t = 0; t < kDepth; ++t) {
                const AioCompletion c = q.complete();
                EXPECT_EQ(c.result, static_cast<int64_t>(kN));
                tags.insert(c.tag);
            }
            EXPECT_EQ(tags.size(), kDepth);
            EXPECT_EQ(*tags.begin(), 100 + round * kDepth);
            EXPECT_EQ(q.in_flight(), 0u);
        }
        std::memset(in.get(), 0, 2 * kDepth * kN);
        q.prepare(fd, AioOp::kRead, in.get(), 2 * kDepth * kN, 0, 1);
        q.prepare(fd, AioOp::kRead, in.get(), kN, 2 * kDepth * kN, 2);  // past the end: short
        for (int i = 0; i < 2; ++i) {
            const AioCompletion c = q.complete();
            EXPECT_EQ(c.result, c.tag == 1 ? static_cast<int64_t>(2 * kDepth * kN) : 0);
        }
        EXPECT_EQ(std::memcmp(in.get(), out.get(), 2 * kDepth * kN), 0);
        ::close(fd);
    }
    fs::remove(path);
}

TEST(AioBuffer, IsAlignedAndHugePageAlignedWhenItHoldsOne) {
    AlignedBuffer small = alloc_aligned_buffer(100, "test");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.get()) % kAioAlign, 0u);
    AlignedBuffer big = alloc_aligned_buffer(kAioHugePage, "test");
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.get()) % kAioHugePage, 0u);
}

}  // namespace
}  // namespace zt
