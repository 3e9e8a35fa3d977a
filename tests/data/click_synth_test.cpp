// Synthetic click logs (data/click/synth_ctr.h, Note [Synthetic teacher]) and the Zipf sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>

#include "click_test_util.h"
#include "data/click/click_metrics.h"
#include "data/click/ctr_file.h"
#include "data/click/synth_ctr.h"
#include "data/click/zipf.h"
#include "util/random.h"

namespace zt {
namespace {

using click_test::TempDir;

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(Zipf, FrequenciesMatchThePowerLaw) {
    // n = 10 ranks, s = 1.05 and s = 1 (the log branch): observed frequencies within 5 standard
    // errors of k^-s / sum_j j^-s over 200k draws.
    for (double s : {1.05, 1.0, 2.5}) {
        ZipfSampler z(10, s);
        Rng rng(11);
        const int draws = 200000;
        std::vector<int> count(11, 0);
        for (int i = 0; i < draws; ++i) ++count[z.sample([&] { return rng.uniform(); })];
        double norm = 0;
        for (int k = 1; k <= 10; ++k) norm += std::pow(k, -s);
        for (int k = 1; k <= 10; ++k) {
            const double p = std::pow(k, -s) / norm;
            const double se = std::sqrt(p * (1 - p) / draws);
            EXPECT_NEAR(count[k] / double(draws), p, 5 * se) << "s " << s << " rank " << k;
        }
        EXPECT_EQ(count[0], 0);
    }
    ZipfSampler one(1, 1.05);
    EXPECT_EQ(one.sample([] { return 0.3; }), 1);
}

TEST(SynthCtr, SameBitsForAnyThreadCount) {
    TempDir dir;
    SynthCtrOptions o;
    o.records = 20000;  // three chunks, the last partial
    o.eval_records = 3000;
    o.seed = 17;
    o.table_rows = {1000, 3, 50000, 1};
    o.dense_features = 5;
    o.hotness = 2;
    std::string ref, ref_eval;
    SynthCtrResult first;
    for (int threads : {1, 2, 3}) {
        o.threads = threads;
        const auto r = write_synth_ctr(o, dir.file("t.ctr"), dir.file("e.ctr"));
        if (threads == 1) {
            ref = read_bytes(dir.file("t.ctr"));
            ref_eval = read_bytes(dir.file("e.ctr"));
            first = r;
            continue;
        }
        EXPECT_EQ(read_bytes(dir.file("t.ctr")), ref) << threads << " threads";
        EXPECT_EQ(read_bytes(dir.file("e.ctr")), ref_eval) << threads << " threads";
        EXPECT_EQ(r.teacher_auc, first.teacher_auc);
        EXPECT_EQ(r.positive_rate, first.positive_rate);
    }
    auto f = CtrFile::open(dir.file("t.ctr"));
    EXPECT_EQ(f->records(), 20000);
    EXPECT_EQ(f->dense_features(), 5);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(f->hotness(k), 2);
    EXPECT_NO_THROW(f->validate());
    EXPECT_EQ(CtrFile::open(dir.file("e.ctr"))->records(), 3000);
    o.seed = 18;
    o.eval_records = 0;
    write_synth_ctr(o, dir.file("t.ctr"));
    EXPECT_NE(read_bytes(dir.file("t.ctr")), ref);
}

// --raw-ids: the same records, labels and dense values as the plain file, with table k's id i
// written as synth_raw_id(k, i) (distinct over tables and ids, spread over 64 bits).
TEST(SynthCtr, RawIdsAreTheSameDrawsUnderABijectiveMix) {
    TempDir dir;
    SynthCtrOptions o;
    o.records = 3000;
    o.seed = 5;
    o.table_rows = {1000, 40};
    o.dense_features = 3;
    o.hotness = 2;
    write_synth_ctr(o, dir.file("plain.ctr"));
    o.raw_ids = {false, true};
    write_synth_ctr(o, dir.file("raw.ctr"));
    auto a = CtrFile::open(dir.file("plain.ctr")), b = CtrFile::open(dir.file("raw.ctr"));
    ASSERT_EQ(a->records(), b->records());
    EXPECT_TRUE(std::equal(a->labels().begin(), a->labels().end(), b->labels().begin()));
    EXPECT_TRUE(std::equal(a->dense().begin(), a->dense().end(), b->dense().begin()));
    EXPECT_TRUE(std::equal(a->ids32(0).begin(), a->ids32(0).end(), b->ids32(0).begin()));
    ASSERT_TRUE(b->raw_ids(1));
    EXPECT_EQ(b->table_rows()[1], 0);
    ASSERT_EQ(a->ids32(1).size(), b->ids64(1).size());
    std::map<int64_t, int32_t> seen;  // raw -> plain: one plain id per raw id (no collisions)
    for (size_t j = 0; j < a->ids32(1).size(); ++j) {
        const int32_t id = a->ids32(1)[j];
        EXPECT_EQ(b->ids64(1)[j], synth_raw_id(1, id));
        const auto [it, fresh] = seen.emplace(b->ids64(1)[j], id);
        EXPECT_EQ(it->second, id);
    }
    EXPECT_GT(seen.size(), 10u);
    EXPECT_NE(synth_raw_id(0, 3), synth_raw_id(1, 3));
    o.raw_ids = {true};  // one flag per table
    EXPECT_THROW(write_synth_ctr(o, dir.file("x.ctr")), Error);
}

TEST(SynthCtr, TeacherAucAndPositiveRateInBand) {
    TempDir dir;
    SynthCtrOptions o;
    o.records = 20000;
    o.eval_records = 20000;
    o.seed = 3;
    o.table_rows = {1460, 583, 100000, 100000, 305, 24, 12517, 633, 3, 93145};
    o.threads = 2;
    const auto r = write_synth_ctr(o, dir.file("t.ctr"), dir.file("e.ctr"));
    EXPECT_EQ(r.records, 20000);
    EXPECT_EQ(r.eval_records, 20000);
    // Design targets 0.79 and 0.25 (Note [Synthetic teacher]); the bands allow for the score not
    // being exactly normal and for sampling (about 0.005 and 0.003 standard error here).
    EXPECT_GT(r.teacher_auc, 0.75);
    EXPECT_LT(r.teacher_auc, 0.82);
    EXPECT_GT(r.positive_rate, 0.21);
    EXPECT_LT(r.positive_rate, 0.29);
    EXPECT_GT(r.teacher_log_loss, 0.3);
    EXPECT_LT(r.teacher_log_loss, 0.6);
    // Popular ids are not all small: the most frequent id of the 100000-row table is scattered.
    auto f = CtrFile::open(dir.file("t.ctr"));
    std::vector<int> count(100000, 0);
    for (int32_t id : f->ids32(2)) ++count[id];
    const auto top = std::max_element(count.begin(), count.end()) - count.begin();
    EXPECT_GT(count[top], 20000 / 20);  // rank 1 of Zipf(1.05) over 1e5 ids: p about 0.09
    EXPECT_NE(top, 0);
    // The eval file comes from the same teacher: its click rate is close to the training one's.
    auto e = CtrFile::open(dir.file("e.ctr"));
    double pos = 0;
    for (float y : e->labels()) pos += y;
    EXPECT_NEAR(pos / 20000, r.positive_rate, 0.03);
}

TEST(SynthCtr, BadOptionsAreErrors) {
    TempDir dir;
    SynthCtrOptions o;
    o.records = 10;
    EXPECT_THROW(write_synth_ctr(o, dir.file("a.ctr")), Error);  // no tables
    o.table_rows = {10};
    o.hotness = 0;
    EXPECT_THROW(write_synth_ctr(o, dir.file("a.ctr")), Error);
    o.hotness = 1;
    o.eval_records = 5;
    EXPECT_THROW(write_synth_ctr(o, dir.file("a.ctr")), Error);  // no eval path
}

}  // namespace
}  // namespace zt
