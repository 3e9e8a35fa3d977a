// Click streams (data/click/click_stream.h, synth_ctr_stream.h): parts of a stream are the
// records of one long synthetic file cut in pieces (drift 0), a batch across part boundaries
// reads what the single file holds, drift moves the ids' popularity, waiting ends after the idle
// timeout, parts arriving later are read, and a part arriving out of name order is refused.
#include "data/click/click_stream.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "click_test_util.h"
#include "data/click/synth_ctr_stream.h"

namespace zt {
namespace {

using click_test::TempDir;

SynthStreamOptions stream_options(int64_t files, double drift = 0) {
    SynthStreamOptions o;
    o.records.seed = 9;
    o.records.table_rows = {500, 40};
    o.records.dense_features = 3;
    o.records.hotness = 2;
    o.records.threads = 1;
    o.records.drift = drift;
    o.files = files;
    o.records_per_file = 100;
    return o;
}

TEST(ClickStream, PartsReadLikeOneFileAcrossTheirBoundaries) {
    TempDir dir;
    write_synth_stream(stream_options(3), dir.file("s"));
    SynthCtrOptions whole = stream_options(1).records;
    whole.records = 300;
    write_synth_ctr(whole, dir.file("whole.ctr"));
    ClickDatasetOptions o;
    o.shuffle = false;
    const ClickDataset one(CtrFile::open(dir.file("whole.ctr")), o);
    ClickStream stream({dir.file("s"), 0.0});
    EXPECT_EQ(stream.records(), 300);
    EXPECT_EQ(stream.parts(), 3);
    ClickBatchBuffers got, want;
    for (auto [first, count] :
         {std::pair{0, 300}, std::pair{90, 20}, std::pair{150, 150}, std::pair{99, 102}}) {
        stream.fill(first, count, got);
        one.fill(first, count, want);
        click_test::expect_same_records(got, want);
    }
}

TEST(ClickStream, DriftMovesTheIdsPopularity) {
    TempDir dir;
    write_synth_stream(stream_options(4, 0.5), dir.file("s"));
    ClickStream stream({dir.file("s"), 0.0});
    ClickBatchBuffers first, last;
    stream.fill(0, 100, first);
    stream.fill(300, 100, last);
    // Table 0's mean id rank moves by about 0.5 x 300 positions of its permuted order: the
    // sets of ids differ far more than two draws of one distribution would.
    std::vector<int64_t> a = first.ids[0], b = last.ids[0];
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::vector<int64_t> common;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(common));
    EXPECT_LT(common.size(), a.size() / 4) << "ids shared by records 0-99 and 300-399";
}

// teacher_drift turns the teacher: the records' features are the same draws, their labels come
// from a teacher that has turned by the record's angle (record 0: none).
TEST(ClickStream, TeacherDriftChangesTheLabelsNotTheFeatures) {
    TempDir dir;
    SynthStreamOptions still = stream_options(3), turning = still;
    turning.records.teacher_drift = 1.5707963 / 300;  // a quarter turn over the stream
    write_synth_stream(still, dir.file("a"));
    write_synth_stream(turning, dir.file("b"));
    ClickStream a({dir.file("a"), 0.0}), b({dir.file("b"), 0.0});
    ClickBatchBuffers x, y;
    a.fill(0, 300, x);
    b.fill(0, 300, y);
    EXPECT_EQ(x.dense, y.dense);
    EXPECT_EQ(x.ids, y.ids);
    EXPECT_EQ(x.labels[0], y.labels[0]);
    int first = 0, last = 0;  // labels that differ in the first and last 100 records
    for (int r = 0; r < 100; ++r) first += x.labels[r] != y.labels[r];
    for (int r = 200; r < 300; ++r) last += x.labels[r] != y.labels[r];
    EXPECT_GT(last, first);
    EXPECT_GT(last, 5);
}

TEST(ClickStream, WaitsForPartsAndEndsAfterTheIdleTimeout) {
    TempDir dir;
    SynthStreamOptions o = stream_options(1);
    write_synth_stream(o, dir.file("s"));
    ClickStream stream({dir.file("s"), 0.2, 0.01});
    EXPECT_TRUE(stream.wait_for(100));
    EXPECT_FALSE(stream.wait_for(101));  // nothing more within 0.2 s
    o.first_file = 1;
    write_synth_stream(o, dir.file("s"));
    EXPECT_TRUE(stream.wait_for(200));
    EXPECT_EQ(stream.parts(), 2);
    EXPECT_GT(stream.arrival(150), 0.0);
    EXPECT_GE(stream.arrival(150), stream.arrival(50));
    // A part named before one already read renumbers nothing: it is refused.
    std::filesystem::copy_file(dir.file("s/part-000001.ztclick"),
                               dir.file("s/part-000000a.ztclick"));
    o.first_file = 2;
    write_synth_stream(o, dir.file("s"));
    try {
        stream.wait_for(300);
        FAIL() << "an out-of-order part was read";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("parts must arrive in name order"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace zt
