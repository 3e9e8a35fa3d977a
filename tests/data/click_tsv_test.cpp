// Criteo TSV conversion (data/click/criteo_tsv.h, Note [Criteo transform]): the dense transform,
// the id hash checked against an independent splitmix64, empty fields, multi-hot, bad lines.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "click_test_util.h"
#include "data/click/criteo_tsv.h"
#include "data/click/ctr_file.h"

namespace zt {
namespace {

using click_test::TempDir;

// splitmix64 written out again from its published constants, independently of util/random.h.
uint64_t reference_hash(uint64_t v) {
    uint64_t z = v + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

std::vector<int64_t> rows26() {
    std::vector<int64_t> r;
    for (int k = 0; k < 26; ++k) r.push_back(1000 + 37 * k);
    return r;
}

// A line from a label, 13 dense fields and 26 categorical fields.
std::string line(const std::string& label, std::vector<std::string> dense,
                 std::vector<std::string> cats) {
    std::string s = label;
    for (auto& d : dense) s += "\t" + d;
    for (auto& c : cats) s += "\t" + c;
    return s;
}
std::vector<std::string> cats_of(const std::string& v) { return std::vector<std::string>(26, v); }
std::vector<std::string> dense_of(const std::string& v) { return std::vector<std::string>(13, v); }

std::string convert_error(const std::string& in, const std::string& out) {
    try {
        convert_criteo_tsv(in, out, rows26(), BadRecord::kFatal);
    } catch (const Error& e) {
        return e.message();
    }
    return "";
}

TEST(CriteoTsv, TransformsHashesAndMultiHot) {
    TempDir dir;
    std::vector<std::string> d1 = dense_of("");
    d1[0] = "0";
    d1[1] = "5";
    d1[2] = "-3";
    d1[3] = "1234567";
    std::vector<std::string> c1 = cats_of("");
    c1[0] = "68fd1e64";
    c1[1] = "FFFFFFFFFFFFFFFF";
    c1[2] = "a,b,0";  // multi-hot
    c1[25] = "0";
    {
        std::ofstream f(dir.file("in.tsv"));
        f << line("1", d1, c1) << "\n" << line("0", dense_of("2"), cats_of("1f")) << "\r\n";
    }
    int calls = 0;
    int64_t last = 0;
    const auto res = convert_criteo_tsv(
        dir.file("in.tsv"), dir.file("out.ctr"), rows26(), BadRecord::kFatal,
        [&](int64_t done, int64_t total) {
            ++calls;
            last = done;
            EXPECT_EQ(total, int64_t(std::filesystem::file_size(dir.file("in.tsv"))));
        });
    EXPECT_EQ(res.records, 2);
    EXPECT_EQ(res.skipped, 0);
    EXPECT_GE(calls, 1);
    EXPECT_EQ(last, int64_t(std::filesystem::file_size(dir.file("in.tsv"))));
    auto f = CtrFile::open(dir.file("out.ctr"));
    ASSERT_EQ(f->records(), 2);
    ASSERT_EQ(f->dense_features(), 13);
    ASSERT_EQ(f->tables(), 26);
    EXPECT_EQ(f->labels()[0], 1.0f);
    EXPECT_EQ(f->labels()[1], 0.0f);
    EXPECT_EQ(f->dense()[0], 0.0f);
    EXPECT_FLOAT_EQ(f->dense()[1], std::log(6.0f));
    EXPECT_EQ(f->dense()[2], 0.0f);  // negative -> 0
    EXPECT_FLOAT_EQ(f->dense()[3], static_cast<float>(std::log(1234568.0)));
    EXPECT_EQ(f->dense()[4], 0.0f);  // empty -> 0
    EXPECT_FLOAT_EQ(f->dense()[13 + 7], std::log(3.0f));
    auto id = [&](uint64_t v, int k) {
        return static_cast<int32_t>(reference_hash(v) % rows26()[k]);
    };
    auto bag = [&](int k, int64_t i) {
        auto o = f->offsets(k);
        return std::vector<int32_t>(f->ids32(k).begin() + o[i], f->ids32(k).begin() + o[i + 1]);
    };
    EXPECT_EQ(bag(0, 0), std::vector<int32_t>{id(0x68fd1e64, 0)});
    EXPECT_EQ(bag(1, 0), std::vector<int32_t>{id(~uint64_t{0}, 1)});
    EXPECT_EQ(bag(2, 0), (std::vector<int32_t>{id(0xa, 2), id(0xb, 2), id(0, 2)}));
    EXPECT_EQ(bag(3, 0), std::vector<int32_t>{0});  // empty -> id 0
    EXPECT_EQ(bag(25, 0), std::vector<int32_t>{id(0, 25)});
    for (int k = 0; k < 26; ++k) EXPECT_EQ(bag(k, 1), std::vector<int32_t>{id(0x1f, k)});
    EXPECT_EQ(criteo_hash_id(0x68fd1e64, 1000), id(0x68fd1e64, 0));
    EXPECT_NO_THROW(f->validate());
}

// A table of rows 0 (a dynamic table's) keeps each hex value as its raw 64-bit id: no hashing,
// so two values never share an id; the other tables hash as before.
TEST(CriteoTsv, TablesOfRowsZeroKeepTheRawValues) {
    TempDir dir;
    std::vector<std::string> c1 = cats_of("7");
    c1[0] = "68fd1e64";
    c1[1] = "FFFFFFFFFFFFFFFF";
    c1[2] = "a,b,0";
    c1[3] = "";
    {
        std::ofstream f(dir.file("in.tsv"));
        f << line("1", dense_of("1"), c1) << "\n";
    }
    std::vector<int64_t> rows = rows26();
    for (int k : {0, 1, 2, 3}) rows[static_cast<size_t>(k)] = 0;
    convert_criteo_tsv(dir.file("in.tsv"), dir.file("out.ctr"), rows, BadRecord::kFatal);
    auto f = CtrFile::open(dir.file("out.ctr"));
    auto raw = [&](int k) {
        EXPECT_TRUE(f->raw_ids(k));
        return std::vector<int64_t>(f->ids64(k).begin(), f->ids64(k).end());
    };
    EXPECT_EQ(raw(0), std::vector<int64_t>{0x68fd1e64});
    EXPECT_EQ(raw(1), std::vector<int64_t>{-1});  // all 64 bits set
    EXPECT_EQ(raw(2), (std::vector<int64_t>{0xa, 0xb, 0}));
    EXPECT_EQ(raw(3), std::vector<int64_t>{0});  // empty -> raw id 0
    EXPECT_FALSE(f->raw_ids(4));
    EXPECT_EQ(f->ids32(4)[0], static_cast<int32_t>(reference_hash(7) % rows26()[4]));
    rows[0] = -1;
    EXPECT_THROW(check_criteo_table_rows(rows), Error);
}

TEST(CriteoTsv, BadLinesFatalNameFileAndLineOrSkipWithCounts) {
    TempDir dir;
    const std::string good = line("0", dense_of("1"), cats_of("ab"));
    struct Case {
        std::string bad, what;
    };
    std::vector<std::string> d = dense_of("1");
    d[4] = "1.5";
    std::vector<std::string> c = cats_of("ab");
    c[7] = "xyz";
    std::vector<std::string> c2 = cats_of("ab");
    c2[3] = "a,,b";
    const std::vector<Case> cases = {
        {line("0", dense_of("1"), std::vector<std::string>(25, "ab")), "39 tab-separated columns"},
        {good + "\textra", "more than 40"},
        {line("2", dense_of("1"), cats_of("ab")), "label \"2\""},
        {line("", dense_of("1"), cats_of("ab")), "label \"\""},
        {line("1", d, cats_of("ab")), "dense field 5 \"1.5\""},
        {line("1", dense_of("1"), c), "categorical field 8 \"xyz\""},
        {line("1", dense_of("1"), c2), "categorical field 4"},
        {line("1", dense_of("1"), cats_of("12345678123456789")), "1 to 16 digits"},
        {"", "1 tab-separated columns"},
    };
    for (const Case& cs : cases) {
        std::ofstream(dir.file("in.tsv")) << good << "\n" << good << "\n" << cs.bad << "\n" << good;
        const std::string msg = convert_error(dir.file("in.tsv"), dir.file("out.ctr"));
        EXPECT_NE(msg.find(dir.file("in.tsv") + ":3: "), std::string::npos) << msg;
        EXPECT_NE(msg.find(cs.what), std::string::npos) << msg;
        EXPECT_FALSE(std::filesystem::exists(dir.file("out.ctr")));
        EXPECT_FALSE(std::filesystem::exists(dir.file("out.ctr.tmp")));
    }
    {
        std::ofstream f(dir.file("mixed.tsv"));
        for (int i = 0; i < 10; ++i) f << (i % 3 == 1 ? cases[i % cases.size()].bad : good) << "\n";
    }
    const auto res =
        convert_criteo_tsv(dir.file("mixed.tsv"), dir.file("out.ctr"), rows26(), BadRecord::kSkip);
    EXPECT_EQ(res.records, 7);
    EXPECT_EQ(res.skipped, 3);
    EXPECT_EQ(CtrFile::open(dir.file("out.ctr"))->records(), 7);
}

TEST(CriteoTsv, EmptyFileAndWrongTableCountAreErrors) {
    TempDir dir;
    std::ofstream(dir.file("empty.tsv")).close();
    const std::string msg = convert_error(dir.file("empty.tsv"), dir.file("o.ctr"));
    EXPECT_NE(msg.find(dir.file("empty.tsv")), std::string::npos) << msg;
    EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
    std::ofstream(dir.file("bad.tsv")) << "x\n";
    EXPECT_THROW(
        convert_criteo_tsv(dir.file("bad.tsv"), dir.file("o.ctr"), rows26(), BadRecord::kSkip),
        Error);  // no good line
    const std::vector<int64_t> three = {1, 2, 3};
    EXPECT_THROW(
        convert_criteo_tsv(dir.file("bad.tsv"), dir.file("o.ctr"), three, BadRecord::kFatal),
        Error);
}

TEST(CriteoTsv, KaggleTableRows) {
    const auto r = criteo_kaggle_table_rows();
    ASSERT_EQ(r.size(), 26u);
    EXPECT_EQ(r[2], 10131227);
    int64_t total = 0;
    for (int64_t v : r) total += v;
    EXPECT_EQ(total, 33762577);  // the sum of the 26 published counts
}

}  // namespace
}  // namespace zt
