// The ZTCLICK format (data/click/ctr_file.h, Note [ZTCLICK layout]): round trips, block
// alignment, and the errors for truncated, corrupt and out-of-range files.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "click_test_util.h"
#include "data/click/click_dataset.h"
#include "data/click/ctr_file.h"
#include "util/error.h"

namespace zt {
namespace {

using click_test::make_records;
using click_test::Records;
using click_test::TempDir;
using click_test::write_records;

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& b) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
}
// The message of the zt::Error that f throws ("" when none).
template <typename Fn>
std::string error_of(Fn&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.message();
    }
    return "";
}

void expect_same(const CtrFile& f, const Records& r) {
    const int64_t N = static_cast<int64_t>(r.labels.size());
    ASSERT_EQ(f.records(), N);
    ASSERT_EQ(f.dense_features(), r.F);
    ASSERT_EQ(f.tables(), static_cast<int>(r.rows.size()));
    EXPECT_EQ(std::vector<int64_t>(f.table_rows().begin(), f.table_rows().end()), r.rows);
    for (int64_t i = 0; i < N; ++i) {
        EXPECT_EQ(f.labels()[i], r.labels[i]);
        for (int j = 0; j < r.F; ++j) EXPECT_EQ(f.dense()[i * r.F + j], r.dense[i][j]);
        for (int k = 0; k < f.tables(); ++k) {
            const int64_t b = f.offsets(k)[i], e = f.offsets(k)[i + 1];
            ASSERT_EQ(e - b, static_cast<int64_t>(r.ids[i][k].size())) << "record " << i;
            for (int64_t j = b; j < e; ++j) {
                EXPECT_EQ(f.raw_ids(k) ? f.ids64(k)[j] : f.ids32(k)[j], r.ids[i][k][j - b]);
                if (!r.weights.empty()) {
                    EXPECT_EQ(f.weights(k)[j], r.weights[i][k][j - b]);
                }
            }
        }
    }
}

TEST(CtrFile, RoundTripWithAndWithoutWeights) {
    TempDir dir;
    for (bool weighted : {false, true}) {
        // 37 records, F = 3, tables of 5, 1 and 1000 rows, bags of 0..3 ids.
        const Records r = make_records(37, 3, {5, 1, 1000}, 3, weighted);
        const std::string path = dir.file(weighted ? "w.ctr" : "u.ctr");
        write_records(path, r);
        EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
        auto f = CtrFile::open(path);
        expect_same(*f, r);
        EXPECT_EQ(f->has_weights(), weighted);
        for (int k = 0; k < 3; ++k) {
            EXPECT_EQ(f->weights(k).size(), weighted ? f->ids32(k).size() : 0u);
            EXPECT_EQ(f->hotness(k), -1);  // bag sizes vary
        }
        EXPECT_NO_THROW(f->validate(2));
    }
}

// A table of rows 0 holds raw 64-bit ids (a dynamic table's) as int64, beside int32 tables; the
// header's flag bit 1 says so, and a reader batch carries the ids as they were written.
TEST(CtrFile, RawIdTablesRoundTripBesideStaticOnes) {
    TempDir dir;
    for (bool weighted : {false, true}) {
        const Records r = make_records(41, 2, {5, 0, 1000, 0}, 3, weighted, 9);
        const std::string path = dir.file(weighted ? "w.ctr" : "u.ctr");
        write_records(path, r);
        auto f = CtrFile::open(path);
        expect_same(*f, r);
        EXPECT_FALSE(f->raw_ids(0));
        EXPECT_TRUE(f->raw_ids(1));
        EXPECT_TRUE(f->ids32(1).empty());
        EXPECT_TRUE(f->ids64(0).empty());
        EXPECT_EQ(reinterpret_cast<uintptr_t>(f->ids64(3).data()) % 64, 0u);
        bool wide = false;  // the draws use all 64 bits: some ids are past 2^32, some negative
        for (int64_t id : f->ids64(1)) wide = wide || id < 0 || id > (int64_t{1} << 32);
        EXPECT_TRUE(wide);
        EXPECT_NO_THROW(f->validate(2));
        const std::string bytes = read_bytes(path);
        uint32_t flags = 0;
        std::memcpy(&flags, bytes.data() + 12, 4);
        EXPECT_EQ(flags, (weighted ? kCtrFlagWeights : 0u) | kCtrFlagRawIds);
        // In order, as a batch: table 1's ids are the raw values.
        ClickDatasetOptions o;
        o.shuffle = false;
        ClickDataset ds(f, o);
        ClickBatchBuffers b;
        ds.fill(0, 41, b);
        std::vector<int64_t> want;
        for (int64_t i = 0; i < 41; ++i)
            want.insert(want.end(), r.ids[i][1].begin(), r.ids[i][1].end());
        EXPECT_EQ(b.ids[1], want);
        // The flag must agree with the tables: cleared, the reader refuses the file.
        std::string bad = bytes;
        const uint32_t cleared = flags & ~kCtrFlagRawIds;
        std::memcpy(bad.data() + 12, &cleared, 4);
        write_bytes(dir.file("bad.ctr"), bad);
        EXPECT_NE(error_of([&] { CtrFile::open(dir.file("bad.ctr")); }).find("flag bit 1"),
                  std::string::npos);
    }
    // Without raw tables the flag stays clear (files written before raw ids read as they did).
    const Records plain = make_records(5, 1, {3}, 2, false);
    write_records(dir.file("p.ctr"), plain);
    uint32_t flags = 1;
    std::memcpy(&flags, read_bytes(dir.file("p.ctr")).data() + 12, 4);
    EXPECT_EQ(flags, 0u);
}

TEST(CtrFile, BlocksAre64ByteAlignedAndSizeIsExact) {
    TempDir dir;
    const Records r = make_records(13, 5, {7, 9}, 2, true);
    write_records(dir.file("a.ctr"), r);
    auto f = CtrFile::open(dir.file("a.ctr"));
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; };
    EXPECT_TRUE(aligned(f->labels().data()));
    EXPECT_TRUE(aligned(f->dense().data()));
    int64_t expect = 64 * ((32 + 24 * 2 + 63) / 64);  // header
    auto block = [&](int64_t bytes) { expect = (expect + 63) / 64 * 64 + bytes; };
    block(4 * 13);
    block(4 * 13 * 5);
    for (int k = 0; k < 2; ++k) {
        EXPECT_TRUE(aligned(f->offsets(k).data()));
        EXPECT_TRUE(aligned(f->ids32(k).data()));
        EXPECT_TRUE(aligned(f->weights(k).data()));
        const int64_t nnz = static_cast<int64_t>(f->ids32(k).size());
        block(8 * 14);
        block(4 * nnz);
        block(4 * nnz);
    }
    EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(dir.file("a.ctr"))), expect);
}

TEST(CtrFile, ConstantBagSizeIsRecordedAsHotness) {
    TempDir dir;
    CtrFileWriter w(dir.file("h.ctr"), 0, {10, 10});
    for (int i = 0; i < 4; ++i) {
        const int64_t a[2] = {i, i + 1}, b[1] = {i};
        const std::span<const int64_t> bags[2] = {a, b};
        w.add(0, {}, bags);
    }
    w.finish();
    auto f = CtrFile::open(dir.file("h.ctr"));
    EXPECT_EQ(f->hotness(0), 2);
    EXPECT_EQ(f->hotness(1), 1);
    EXPECT_EQ(f->dense().size(), 0u);
}

TEST(CtrFile, TruncatedOrPaddedFileNamesTheFile) {
    TempDir dir;
    write_records(dir.file("a.ctr"), make_records(20, 2, {4, 4}, 2, false));
    const std::string bytes = read_bytes(dir.file("a.ctr"));
    write_bytes(dir.file("t.ctr"), bytes.substr(0, bytes.size() - 3));
    std::string msg = error_of([&] { CtrFile::open(dir.file("t.ctr")); });
    EXPECT_NE(msg.find(dir.file("t.ctr")), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    write_bytes(dir.file("p.ctr"), bytes + "xx");
    msg = error_of([&] { CtrFile::open(dir.file("p.ctr")); });
    EXPECT_NE(msg.find("trailing"), std::string::npos) << msg;
    write_bytes(dir.file("s.ctr"), bytes.substr(0, 10));
    msg = error_of([&] { CtrFile::open(dir.file("s.ctr")); });
    EXPECT_NE(msg.find("too short"), std::string::npos) << msg;
    write_bytes(dir.file("e.ctr"), "");
    EXPECT_NE(error_of([&] { CtrFile::open(dir.file("e.ctr")); }), "");
    msg = error_of([&] { CtrFile::open(dir.file("missing.ctr")); });
    EXPECT_NE(msg.find("missing.ctr"), std::string::npos) << msg;
}

TEST(CtrFile, BadMagicVersionAndOffsetsAreErrors) {
    TempDir dir;
    write_records(dir.file("a.ctr"), make_records(20, 2, {4, 4}, 2, false));
    const std::string bytes = read_bytes(dir.file("a.ctr"));
    std::string b = bytes;
    b[0] = 'X';
    write_bytes(dir.file("m.ctr"), b);
    EXPECT_NE(error_of([&] { CtrFile::open(dir.file("m.ctr")); }).find("magic"), std::string::npos);
    b = bytes;
    b[8] = 2;
    write_bytes(dir.file("v.ctr"), b);
    EXPECT_NE(error_of([&] { CtrFile::open(dir.file("v.ctr")); }).find("version 2"),
              std::string::npos);
    // Table 1's first offset made 1 (it must be 0).
    auto f = CtrFile::open(dir.file("a.ctr"));
    const size_t off1 = reinterpret_cast<const char*>(f->offsets(1).data()) -
                        reinterpret_cast<const char*>(f->labels().data()) + 128;  // header: 128 B
    b = bytes;
    b[off1] = 1;
    write_bytes(dir.file("o.ctr"), b);
    const std::string msg = error_of([&] { CtrFile::open(dir.file("o.ctr")); });
    EXPECT_NE(msg.find("table 1"), std::string::npos) << msg;
}

// Patches one int32 id / one int64 offset inside a copy of the file, found through a reader.
TEST(CtrFile, IdPastTableAndNonMonotoneOffsetsNameFileTableRecord) {
    TempDir dir;
    // Every bag one id, so record i's id of table k is ids(k)[i].
    CtrFileWriter w(dir.file("a.ctr"), 1, {10, 20});
    for (int i = 0; i < 50; ++i) {
        const int64_t a[1] = {i % 10}, c[1] = {i % 20};
        const std::span<const int64_t> bags[2] = {a, c};
        const float d[1] = {1};
        w.add(1, d, bags);
    }
    w.finish();
    const std::string bytes = read_bytes(dir.file("a.ctr"));
    auto f = CtrFile::open(dir.file("a.ctr"));
    const char* base = reinterpret_cast<const char*>(f->labels().data()) - 128;
    const size_t id_at = reinterpret_cast<const char*>(&f->ids32(1)[37]) - base;
    std::string b = bytes;
    const int32_t bad = 20;
    std::memcpy(&b[id_at], &bad, 4);
    write_bytes(dir.file("i.ctr"), b);
    auto g = CtrFile::open(dir.file("i.ctr"));  // opening is O(K): the id is found when read
    EXPECT_NO_THROW(g->check_records(0, 37));
    std::string msg = error_of([&] { g->validate(2); });
    EXPECT_NE(msg.find(dir.file("i.ctr")), std::string::npos) << msg;
    EXPECT_NE(msg.find("table 1 record 37: id 20"), std::string::npos) << msg;
    // A batch read through ClickDataset checks the records it copies (Note [Records checked as
    // they are copied]): a batch without record 37 reads, one with it names the same record.
    ClickDataset ds(g, {.shuffle = false, .seed = 0});
    ClickBatchBuffers batch;
    EXPECT_NO_THROW(ds.fill(0, 37, batch));
    EXPECT_NO_THROW(ds.fill(38, 12, batch));
    msg = error_of([&] { ds.fill(30, 10, batch); });
    EXPECT_NE(msg.find("table 1 record 37: id 20"), std::string::npos) << msg;

    const size_t off_at = reinterpret_cast<const char*>(&f->offsets(0)[10]) - base;
    b = bytes;
    const int64_t back = 3;  // offsets[10] = 3 < offsets[9] = 9
    std::memcpy(&b[off_at], &back, 8);
    write_bytes(dir.file("n.ctr"), b);
    auto h = CtrFile::open(dir.file("n.ctr"));
    msg = error_of([&] { h->validate(1); });
    EXPECT_NE(msg.find("table 0 record 9"), std::string::npos) << msg;
    ClickDataset hs(h, {.shuffle = true, .seed = 3});  // any order: the same record is named
    msg = error_of([&] { hs.fill(0, 50, batch); });
    EXPECT_NE(msg.find("table 0 record 9"), std::string::npos) << msg;
}

TEST(CtrFileWriter, RejectsBadRecordsAndLeavesNothingWithoutFinish) {
    TempDir dir;
    {
        CtrFileWriter w(dir.file("x.ctr"), 2, {5});
        const float d[2] = {0, 0};
        const int64_t ok[1] = {4}, bad[1] = {5};
        const std::span<const int64_t> good_bags[1] = {ok}, bad_bags[1] = {bad};
        EXPECT_NO_THROW(w.add(0, d, good_bags));
        const std::string msg = error_of([&] { w.add(0, d, bad_bags); });
        EXPECT_NE(msg.find("table 0: id 5"), std::string::npos) << msg;
        EXPECT_NE(error_of([&] { w.add(0, std::span<const float>(d, 1), good_bags); }), "");
    }
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
    EXPECT_NE(error_of([&] { CtrFileWriter(dir.file("y.ctr"), 1, {-1}); }), "");
}

}  // namespace
}  // namespace zt
