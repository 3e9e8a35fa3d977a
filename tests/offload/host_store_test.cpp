#include "offload/host_store.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "util/error.h"

namespace zt {
namespace {

struct HostBuffer {
    explicit HostBuffer(size_t n) : p(static_cast<unsigned char*>(alloc_host_buffer(n))) {}
    ~HostBuffer() { free_host_buffer(p); }
    unsigned char* p;
};

TEST(HostStore, WritesThenReadsTheSameBytesAndCountsThem) {
    HostStore s(3 * kStoreAlign + 1);  // rounded up to whole kStoreAlign blocks
    EXPECT_EQ(s.capacity(), 4 * kStoreAlign);
    EXPECT_STREQ(s.tier(), "cpu");
    HostBuffer in(2 * kStoreAlign), out(2 * kStoreAlign);
    for (size_t i = 0; i < 2 * kStoreAlign; ++i) in.p[i] = static_cast<unsigned char>(i * 7 + 1);
    s.wait(s.write(kStoreAlign, in.p, 2 * kStoreAlign));
    s.wait(s.read(kStoreAlign, out.p, 2 * kStoreAlign));
    EXPECT_EQ(std::memcmp(in.p, out.p, 2 * kStoreAlign), 0);
    s.wait(s.read(0, out.p, kStoreAlign));  // never written: zero
    EXPECT_EQ(out.p[0], 0);
    EXPECT_EQ(out.p[kStoreAlign - 1], 0);
    EXPECT_EQ(s.stats().bytes_written, 2 * kStoreAlign);
    EXPECT_EQ(s.stats().bytes_read, 3 * kStoreAlign);
}

TEST(HostStore, RefusesRangesOutsideItAndUnalignedRequests) {
    HostStore s(2 * kStoreAlign);
    HostBuffer b(kStoreAlign);
    EXPECT_THROW(s.read(2 * kStoreAlign, b.p, kStoreAlign), Error);
    EXPECT_THROW(s.read(kStoreAlign, b.p, 2 * kStoreAlign), Error);
    EXPECT_THROW(s.write(100, b.p, kStoreAlign), Error);
    EXPECT_THROW(s.write(0, b.p + 1, kStoreAlign), Error);
}

}  // namespace
}  // namespace zt
