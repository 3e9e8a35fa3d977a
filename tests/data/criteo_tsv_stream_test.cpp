// Criteo TSV as a stream of parts (data/click/criteo_tsv_stream.h): a file that grows while it is
// followed, a line cut in two included, becomes parts holding exactly the records of the whole
// file converted at once, a slow trickle is flushed into a part before part_records fill, a
// finished input (standard input's case) ends with its last line even without a newline, and a
// bad line is named by its line number.
#include "data/click/criteo_tsv_stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "click_test_util.h"
#include "data/click/click_stream.h"

namespace zt {
namespace {

using click_test::random_criteo_lines;
using click_test::TempDir;

std::vector<int64_t> rows26() { return std::vector<int64_t>(26, 97); }

ClickBatchBuffers whole_file(const TempDir& dir, const std::string& text, int64_t n) {
    std::ofstream(dir.file("whole.tsv")) << text;
    convert_criteo_tsv(dir.file("whole.tsv"), dir.file("whole.ctr"), rows26(), BadRecord::kFatal);
    ClickDatasetOptions o;
    o.shuffle = false;
    ClickBatchBuffers b;
    ClickDataset(CtrFile::open(dir.file("whole.ctr")), o).fill(0, n, b);
    return b;
}

TEST(CriteoTsvStream, AGrowingFileBecomesPartsOfTheSameRecords) {
    TempDir dir;
    const std::string text = random_criteo_lines(250, 3);
    const size_t cut = text.size() / 2 + 7;  // inside a line
    std::ofstream(dir.file("in.tsv")) << text.substr(0, cut);
    std::atomic<bool> cancel{false};
    TsvStreamOptions o;
    o.in = dir.file("in.tsv");
    o.dir = dir.file("parts");
    o.table_rows = rows26();
    o.part_records = 100;
    o.flush_s = 0.05;
    o.follow = true;
    o.cancel = &cancel;
    o.poll_s = 0.005;
    TsvStreamResult r;
    std::filesystem::create_directories(o.dir);  // the stream below lists it at once
    std::thread reader([&] { r = stream_criteo_tsv(o); });
    // The first half's whole lines are delivered (a full part, then the rest flushed) before
    // the second half is appended.
    const auto first_lines =
        static_cast<int64_t>(std::count(text.begin(), text.begin() + cut, '\n'));
    ClickStream stream({dir.file("parts"), 5.0, 0.005});
    const bool first_half = stream.wait_for(first_lines);
    std::ofstream(dir.file("in.tsv"), std::ios::app) << text.substr(cut);
    const bool all = stream.wait_for(250);
    cancel = true;
    reader.join();  // before any assertion may return
    ASSERT_TRUE(first_half);
    ASSERT_TRUE(all);
    EXPECT_EQ(r.records, 250);
    // 125-odd lines came first, a part of 100 and the rest flushed after 0.05 s, then the same
    // for the second half: more parts than 250 / 100 rounded up.
    EXPECT_GT(r.parts, 3);
    EXPECT_EQ(stream.records(), 250);
    ClickBatchBuffers got;
    stream.fill(0, 250, got);
    click_test::expect_same_records(got, whole_file(dir, text, 250));
}

TEST(CriteoTsvStream, AFinishedInputEndsWithItsLastLine) {
    TempDir dir;
    std::string text = random_criteo_lines(30, 4);
    text.pop_back();  // the last line without its newline
    std::ofstream(dir.file("in.tsv")) << text;
    TsvStreamOptions o;
    o.in = dir.file("in.tsv");
    o.dir = dir.file("parts");
    o.table_rows = rows26();
    o.part_records = 8;
    const TsvStreamResult r = stream_criteo_tsv(o);
    EXPECT_EQ(r.records, 30);
    EXPECT_EQ(r.parts, 4);  // 8 + 8 + 8 + 6
    ClickStream stream({dir.file("parts"), 0.0});
    ClickBatchBuffers got;
    stream.fill(0, 30, got);
    EXPECT_EQ(got.labels, whole_file(dir, text, 30).labels);
}

TEST(CriteoTsvStream, ABadLineIsNamedOrSkipped) {
    TempDir dir;
    const std::string text = random_criteo_lines(5, 5) + "2\tbad\n" + random_criteo_lines(2, 6);
    std::ofstream(dir.file("in.tsv")) << text;
    TsvStreamOptions o;
    o.in = dir.file("in.tsv");
    o.dir = dir.file("parts");
    o.table_rows = rows26();
    try {
        stream_criteo_tsv(o);
        FAIL() << "a bad line was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("in.tsv:6: "), std::string::npos) << e.what();
    }
    o.on_bad = BadRecord::kSkip;
    o.dir = dir.file("parts2");
    const TsvStreamResult r = stream_criteo_tsv(o);
    EXPECT_EQ(r.records, 7);
    EXPECT_EQ(r.skipped, 1);
}

}  // namespace
}  // namespace zt
