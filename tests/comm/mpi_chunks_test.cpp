// The MPI backend's chunk arithmetic (Note [Chunked ops], comm/mpi/mpi_chunks.h): how many chunks,
// how many in flight, and that the chunks of a segment cover it exactly, in order, as evenly as
// floor division allows.
#include "comm/mpi/mpi_chunks.h"

#include <gtest/gtest.h>

namespace zt {
namespace {

using mpi_detail::Chunks;

TEST(MpiChunks, CountIsTheVectorOverTheChunkSizeRoundedUp) {
    EXPECT_EQ(Chunks::of(1000, 4, 0, false).count, 1);     // 0: whole
    EXPECT_EQ(Chunks::of(1000, 4, 4000, false).count, 1);  // exactly one chunk
    EXPECT_EQ(Chunks::of(1000, 4, 3999, false).count, 2);
    EXPECT_EQ(Chunks::of(4000001, 4, 4 << 20, false).count, 4);  // ceil(16000004 / 4194304)
    EXPECT_EQ(Chunks::of(7, 8, 1, false).count, 7);              // at most one chunk per element
    EXPECT_EQ(Chunks::of(0, 4, 100, false).count, 1);
}

TEST(MpiChunks, BulkKeepsTwoChunksInFlightUrgentAll) {
    const Chunks bulk = Chunks::of(2051, 4, 100, false), urgent = Chunks::of(2051, 4, 100, true);
    EXPECT_EQ(bulk.count, 83);  // ceil(8204 / 100)
    EXPECT_EQ(bulk.depth, Chunks::kBulkDepth);
    EXPECT_TRUE(bulk.streamed());
    EXPECT_EQ(urgent.count, 83);  // the same messages
    EXPECT_EQ(urgent.depth, 83);
    EXPECT_FALSE(urgent.streamed());
    // As many chunks as it keeps in flight: posted at once, nothing to start beside.
    EXPECT_FALSE(Chunks::of(50, 4, 100, false).streamed());
    EXPECT_FALSE(Chunks::of(1000, 4, 0, false).streamed());
}

TEST(MpiChunks, CutsCoverEverySegmentInOrder) {
    for (int64_t count : {1, 2, 3, 7, 83, 1000}) {
        Chunks ch;
        ch.count = count;
        for (int64_t c : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{700}, int64_t{2051},
                          (int64_t{1} << 40) + 3}) {
            EXPECT_EQ(ch.cut(c, 0), 0);
            EXPECT_EQ(ch.cut(c, count), c) << c << " in " << count;
            for (int64_t k = 0; k < count; ++k) {
                const int64_t len = ch.cut(c, k + 1) - ch.cut(c, k);
                EXPECT_GE(len, c / count) << c << " chunk " << k << " of " << count;
                EXPECT_LE(len, c / count + 1) << c << " chunk " << k << " of " << count;
            }
        }
    }
}

}  // namespace
}  // namespace zt
