// Click batches (data/click/click_dataset.h, click_prefetcher.h): the per-epoch permutation,
// determinism, slices of the global sample stream, and the prefetcher against fill.
#include "data/click/click_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "click_test_util.h"
#include "data/click/click_prefetcher.h"
#include "data/tokens/token_dataset.h"

namespace zt {
namespace {

using click_test::make_records;
using click_test::Records;
using click_test::TempDir;
using click_test::write_records;

// Shared across the tests: 23 records (not a multiple of any batch size used), F = 2, tables of
// 7 and 11 rows, bags of 0..3 ids, with weights.
class ClickData : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new TempDir();
        records_ = new Records(make_records(23, 2, {7, 11}, 3, true));
        write_records(dir_->file("d.ctr"), *records_);
        file_ = new std::shared_ptr<const CtrFile>(CtrFile::open(dir_->file("d.ctr")));
    }
    static void TearDownTestSuite() {
        delete file_;
        delete records_;
        delete dir_;
    }
    // Batch row j must be record i exactly.
    static void expect_row(const ClickBatchBuffers& b, int64_t j, int64_t i) {
        const Records& r = *records_;
        EXPECT_EQ(b.labels[j], r.labels[i]);
        for (int f = 0; f < 2; ++f) EXPECT_EQ(b.dense[j * 2 + f], r.dense[i][f]);
        for (int k = 0; k < 2; ++k) {
            const int64_t s = b.offsets[k][j], e = b.offsets[k][j + 1];
            ASSERT_EQ(e - s, static_cast<int64_t>(r.ids[i][k].size()));
            for (int64_t t = s; t < e; ++t) {
                EXPECT_EQ(b.ids[k][t], r.ids[i][k][t - s]);
                EXPECT_EQ(b.weights[k][t], r.weights[i][k][t - s]);
            }
        }
    }
    static TempDir* dir_;
    static Records* records_;
    static std::shared_ptr<const CtrFile>* file_;
};
TempDir* ClickData::dir_ = nullptr;
Records* ClickData::records_ = nullptr;
std::shared_ptr<const CtrFile>* ClickData::file_ = nullptr;

TEST_F(ClickData, EachEpochVisitsEveryRecordOnceInItsPermutation) {
    ClickDataset ds(*file_, {.shuffle = true, .seed = 5});
    ASSERT_EQ(ds.size(), 23);
    ClickBatchBuffers b;
    ds.fill(0, 3 * 23, b);  // three epochs in one batch
    ASSERT_EQ(b.B, 69);
    for (int e = 0; e < 3; ++e) {
        const std::vector<int64_t> perm = epoch_permutation(23, 5, e);
        std::set<int64_t> seen;
        for (int64_t r = 0; r < 23; ++r) {
            const int64_t s = e * 23 + r;
            EXPECT_EQ(ds.record_index(s), perm[r]);
            seen.insert(ds.record_index(s));
            expect_row(b, s, perm[r]);
        }
        EXPECT_EQ(seen.size(), 23u);
    }
    EXPECT_NE(epoch_permutation(23, 5, 0), epoch_permutation(23, 5, 1));
    const ClickBatch v = b.view();
    EXPECT_EQ(v.B, 69);
    EXPECT_EQ(v.F, 2);
    ASSERT_EQ(v.features(), 2);
    EXPECT_EQ(v.offsets[0].front(), 0);
    EXPECT_EQ(v.offsets[0].size(), 70u);
    EXPECT_EQ(static_cast<int64_t>(v.ids[1].size()), v.offsets[1].back());
    EXPECT_EQ(v.weights[1].size(), v.ids[1].size());
}

TEST_F(ClickData, NoShuffleIsInOrderAndRangeIsRespected) {
    ClickDataset ds(*file_, {.shuffle = false, .seed = 0, .begin = 5, .end = 12});
    ASSERT_EQ(ds.size(), 7);
    ClickBatchBuffers b;
    ds.fill(4, 9, b);  // samples 4..12: records 9, 10, 11, 5, 6, ...
    for (int64_t j = 0; j < 9; ++j) expect_row(b, j, 5 + (4 + j) % 7);
    ClickDataset shuffled(*file_, {.shuffle = true, .seed = 1, .begin = 5, .end = 12});
    for (int64_t s = 0; s < 21; ++s) {
        EXPECT_GE(shuffled.record_index(s), 5);
        EXPECT_LT(shuffled.record_index(s), 12);
    }
    EXPECT_THROW(ClickDataset(*file_, {.shuffle = false, .seed = 0, .begin = 20, .end = 30}),
                 Error);
}

TEST_F(ClickData, SlicesOfGlobalIndicesConcatenateToTheFullBatch) {
    // Step 3 of a global batch of 10 over 2 ranks x 5 (and 3 ranks of uneven slices): what the
    // ranks fill, put together, is what one process fills; repeated fills give the same bits.
    ClickDataset ds(*file_, {.shuffle = true, .seed = 9});
    ClickBatchBuffers full, again;
    ds.fill(30, 10, full);
    ds.fill(30, 10, again);
    EXPECT_EQ(full.labels, again.labels);
    EXPECT_EQ(full.ids, again.ids);
    for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, 5, 10}, {0, 3, 7, 10}}) {
        int64_t j = 0;
        for (size_t r = 0; r + 1 < cuts.size(); ++r) {
            ClickBatchBuffers part;
            ds.fill(30 + cuts[r], cuts[r + 1] - cuts[r], part);
            for (int64_t t = 0; t < part.B; ++t, ++j) expect_row(part, t, ds.record_index(30 + j));
        }
        EXPECT_EQ(j, 10);
    }
    for (int64_t j = 0; j < 10; ++j) expect_row(full, j, ds.record_index(30 + j));
}

TEST_F(ClickData, PrefetcherMatchesFillAndFallsBackOnMismatch) {
    ClickDataset ds(*file_, {.shuffle = true, .seed = 2});
    ClickPrefetcher pf(ds);
    ClickBatchBuffers ref;
    for (int64_t step = 0; step < 6; ++step) {
        pf.prefetch(step * 8, 8);
        const ClickBatchBuffers& b = pf.load(step * 8, 8);
        // The fill thread yields the cores to the step (Note [Background at idle priority]).
        EXPECT_TRUE(pf.fills_at_idle_priority());
        ds.fill(step * 8, 8, ref);
        EXPECT_EQ(b.labels, ref.labels);
        EXPECT_EQ(b.dense, ref.dense);
        EXPECT_EQ(b.ids, ref.ids);
        EXPECT_EQ(b.offsets, ref.offsets);
        EXPECT_EQ(b.weights, ref.weights);
        // Distinct ids per table, counted independently.
        ASSERT_EQ(b.unique_ids.size(), b.ids.size());
        for (size_t k = 0; k < b.ids.size(); ++k)
            EXPECT_EQ(
                b.unique_ids[k],
                static_cast<int64_t>(std::set<int64_t>(b.ids[k].begin(), b.ids[k].end()).size()));
        // ... and indexed for the sharded tables: the distinct ids ascending, each position's
        // index into them, visible through the view.
        const ClickBatch v = b.view();
        ASSERT_EQ(v.distinct.size(), b.ids.size());
        for (size_t k = 0; k < b.ids.size(); ++k) {
            const std::set<int64_t> want(b.ids[k].begin(), b.ids[k].end());
            EXPECT_EQ(std::vector<int64_t>(v.distinct[k].begin(), v.distinct[k].end()),
                      std::vector<int64_t>(want.begin(), want.end()));
            ASSERT_EQ(v.distinct_index[k].size(), b.ids[k].size());
            for (size_t p = 0; p < b.ids[k].size(); ++p)
                EXPECT_EQ(v.distinct[k][static_cast<size_t>(v.distinct_index[k][p])], b.ids[k][p]);
        }
    }
    ds.fill(0, 8, ref);  // a plain fill carries no index, so a view of it offers none
    EXPECT_TRUE(ref.view().distinct.empty());
    pf.prefetch(100, 4);
    const ClickBatchBuffers& m = pf.load(200, 5);  // not what was prefetched: filled now
    ds.fill(200, 5, ref);
    EXPECT_EQ(m.B, 5);
    EXPECT_EQ(m.ids, ref.ids);
    ASSERT_EQ(m.unique_ids.size(), m.ids.size());  // counted on the direct fill too
    const ClickBatchBuffers& n = pf.load(7, 3);    // nothing prefetched
    ds.fill(7, 3, ref);
    EXPECT_EQ(n.labels, ref.labels);
    pf.prefetch(50, 2);  // destroyed with a prefetch pending: joins cleanly
}

TEST(ClickPrefetcherErrors, ThreadErrorIsRethrownByLoad) {
    TempDir dir;
    CtrFileWriter w(dir.file("e.ctr"), 0, {4});
    for (int i = 0; i < 8; ++i) {
        const int64_t a[1] = {i % 4};
        const std::span<const int64_t> bags[1] = {a};
        w.add(0, {}, bags);
    }
    w.finish();
    // Corrupt record 5's id in place (4 is past the table's 4 rows).
    auto f = CtrFile::open(dir.file("e.ctr"));
    const int64_t at = reinterpret_cast<const char*>(&f->ids32(0)[5]) -
                       reinterpret_cast<const char*>(f->labels().data()) + 64;
    f.reset();
    {
        std::fstream io(dir.file("e.ctr"), std::ios::in | std::ios::out | std::ios::binary);
        io.seekp(at);
        const int32_t bad = 4;
        io.write(reinterpret_cast<const char*>(&bad), 4);
    }
    ClickDataset ds(CtrFile::open(dir.file("e.ctr")), {.shuffle = false});
    ClickPrefetcher pf(ds);
    pf.prefetch(0, 8);
    try {
        pf.load(0, 8);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("table 0 record 5"), std::string::npos) << e.message();
    }
    EXPECT_NO_THROW(pf.load(0, 5));
}

}  // namespace
}  // namespace zt
