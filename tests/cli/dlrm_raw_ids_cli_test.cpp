// Raw 64-bit ids end to end (docs/embedding-dynamic.md, "Raw 64-bit ids"): a click file whose
// dynamic table holds ids past 2^63 (int64 column, rows_k 0) trains bit for bit like the same
// records with small ids, because the ids keep their order and, with dim 8, their rows'
// initialization (element id * 8 + c of the stream, mod 2^64); the export keys the rows by the
// raw ids. Two ranks own the wide ids by their hash and train like one process. A static table
// refuses a raw-id file; synthetic data with raw_ids exports synth_raw_id keys; Criteo TSV's
// values key a raw-id table as they are, from a file and from a stream.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "cli_fixture.h"
#include "data/click/ctr_file.h"
#include "data/click/synth_ctr.h"
#include "data/click_test_util.h"
#include "dlrm_cli_util.h"
#include "util/error.h"

namespace zt::testing {
namespace {

constexpr uint64_t kShift = uint64_t{1} << 63;  // 2^63 * 8 = 0 mod 2^64: same initial rows

nlohmann::json raw_config(const std::string& path, bool raw) {
    nlohmann::json dyn = {{"dynamic", true},
                          {"id_range", 700},
                          {"dim", 8},
                          {"min_count", 2},
                          {"evict", {{"unseen_steps", 3}, {"max_rows", 60}}},
                          {"unadmitted", "default_row"}};
    if (raw) dyn["raw_ids"] = true;
    return {
        {"train_micro_batch_size_per_gpu", 32},
        {"gradient_accumulation_steps", 2},
        {"steps", 8},
        {"steps_per_print", 1},
        {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
        {"model",
         {{"type", "dlrm"},
          {"tables",
           {{{"rows", 3001}, {"dim", 8}}, dyn, {{"rows", 40}, {"dim", 8}, {"pooling", "mean"}}}},
          {"bottom_mlp", {16, 8}},
          {"top_mlp", {16}}}},
        {"embedding", {{"optimizer", {{"type", "rowwise_adagrad"}, {"lr", 0.05}}}}},
        {"data", {{"type", "ctr"}, {"path", path}}},
        {"threads", 1}};
}

// The exported keys of table k as written (U64, exact).
std::vector<uint64_t> exported_ids(const fs::path& p, int k) {
    return read_u64(SafetensorsFile(p.string()), str_cat("emb_l.", k, ".ids"));
}

class RawIds : public Cli {
  protected:
    // A plain file (tables of 3001, 700 and 40 rows) and the same records with table 1's ids
    // moved past 2^63 into a raw-id column.
    void write_files() {
        SynthCtrOptions o;
        o.records = 2000;
        o.seed = 3;
        o.table_rows = {3001, 700, 40};
        o.hotness = 2;
        o.threads = 1;
        write_synth_ctr(o, (dir_ / "small.ctr").string());
        auto f = CtrFile::open((dir_ / "small.ctr").string());
        CtrFileWriter w((dir_ / "wide.ctr").string(), f->dense_features(), {3001, 0, 40});
        std::vector<std::vector<int64_t>> bags(3);
        for (int64_t i = 0; i < f->records(); ++i) {
            for (int k = 0; k < 3; ++k) {
                bags[k].clear();
                for (int64_t j = f->offsets(k)[i]; j < f->offsets(k)[i + 1]; ++j) {
                    const int64_t id = f->ids32(k)[j];
                    bags[k].push_back(
                        k == 1 ? static_cast<int64_t>(static_cast<uint64_t>(id) + kShift) : id);
                }
            }
            const std::span<const int64_t> spans[3] = {bags[0], bags[1], bags[2]};
            w.add(f->labels()[i], f->dense().subspan(i * f->dense_features(), f->dense_features()),
                  spans);
        }
        w.finish();
    }
};

TEST_F(RawIds, IdsPastTwoToThe63TrainBitForBitLikeSmallIds) {
    write_files();
    const CommandResult s =
        train_run(raw_config((dir_ / "small.ctr").string(), false), "small", "");
    ASSERT_EQ(s.code, 0) << s.output;
    const CommandResult w = train_run(raw_config((dir_ / "wide.ctr").string(), true), "wide", "");
    ASSERT_EQ(w.code, 0) << w.output;
    const RunLog a = read_run("small"), b = read_run("wide");
    ASSERT_EQ(a.loss.size(), 8u);
    EXPECT_EQ(a.loss, b.loss);  // bit for bit
    EXPECT_EQ(read_tensors(dir_ / "small/model.safetensors"),
              read_tensors(dir_ / "wide/model.safetensors"));
    const auto rs = read_tensors(dir_ / "small/model.dynamic.safetensors");
    const auto rw = read_tensors(dir_ / "wide/model.dynamic.safetensors");
    EXPECT_EQ(rs.at("emb_l.1.weight"), rw.at("emb_l.1.weight"));
    EXPECT_EQ(rs.at("emb_l.1.default"), rw.at("emb_l.1.default"));
    // Keyed by the raw ids: each small id moved by 2^63, none collapsed, evictions too.
    const std::vector<uint64_t> small = exported_ids(dir_ / "small/model.dynamic.safetensors", 1);
    const std::vector<uint64_t> wide = exported_ids(dir_ / "wide/model.dynamic.safetensors", 1);
    ASSERT_FALSE(small.empty());
    ASSERT_EQ(small.size(), wide.size());
    for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(wide[i], small[i] + kShift) << i;
    EXPECT_EQ(rs.at("emb_l.1.evicted").size(), rw.at("emb_l.1.evicted").size());
    EXPECT_FALSE(rs.at("emb_l.1.evicted").empty());

    // Two ranks (threads, accumulation 2) against one process (accumulation 4), no row cap (it
    // is per rank): the wide ids' owners come from their 64-bit hash; the same admissions and
    // evictions, values within the equivalence rule's fp32 tolerance.
    nlohmann::json two = raw_config((dir_ / "wide.ctr").string(), true);
    two["model"]["tables"][1]["evict"] = {{"unseen_steps", 3}};
    nlohmann::json one = two;
    one["gradient_accumulation_steps"] = 4;
    ASSERT_EQ(train_run(one, "one", "").code, 0);
    const CommandResult t = train_run(two, "two", "", 2);
    ASSERT_EQ(t.code, 0) << t.output;
    expect_close(read_run("two"), read_run("one"), "raw ids, 2 ranks vs 1");
    EXPECT_EQ(exported_ids(dir_ / "one/model.dynamic.safetensors", 1),
              exported_ids(dir_ / "two/model.dynamic.safetensors", 1));
}

TEST_F(RawIds, StaticTableRefusesARawIdFileAndSyntheticRawIdsExportTheirKeys) {
    write_files();
    nlohmann::json j = raw_config((dir_ / "wide.ctr").string(), false);
    CommandResult r = train_run(j, "refused", "");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("raw 64-bit ids for feature 1"), std::string::npos) << r.output;

    // data.type synthetic with raw_ids: the generator writes synth_raw_id(1, i), i < id_range.
    j = raw_config("", true);
    j["data"] = {{"type", "synthetic"}, {"records", 2000}, {"eval_records", 0}, {"hotness", 2}};
    j["steps"] = 3;
    r = train_run(j, "synth", "");
    ASSERT_EQ(r.code, 0) << r.output;
    std::set<uint64_t> keys;
    for (int32_t i = 0; i < 700; ++i) keys.insert(static_cast<uint64_t>(synth_raw_id(1, i)));
    const std::vector<uint64_t> ids = exported_ids(dir_ / "synth/model.dynamic.safetensors", 1);
    ASSERT_FALSE(ids.empty());
    for (uint64_t id : ids) EXPECT_TRUE(keys.count(id)) << id;
}

// Criteo TSV converted by the run itself (data.type "criteo_tsv", a file and a stream): the raw-id
// table's rows are keyed by the column's hex values as they are (no hashing), every distinct
// value one row (min_count 1, no eviction), an empty field the raw id 0.
TEST_F(RawIds, CriteoValuesKeyTheTableAsTheyAre) {
    const std::string text = zt::click_test::random_criteo_lines(300, 21);
    std::ofstream(dir_ / "log.tsv") << text;
    std::set<uint64_t> want;  // column 0's values (the 14th tab-separated field)
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        size_t at = 0;
        for (int f = 0; f < 14; ++f) at = line.find('\t', at) + 1;
        const std::string v = line.substr(at, line.find('\t', at) - at);
        want.insert(v.empty() ? 0 : std::stoull(v, nullptr, 16));
    }
    nlohmann::json tables = nlohmann::json::array();
    tables.push_back({{"dynamic", true}, {"raw_ids", true}, {"dim", 4}});
    for (int k = 1; k < 26; ++k) tables.push_back({{"rows", 61}, {"dim", 4}});
    nlohmann::json j = {{"train_micro_batch_size_per_gpu", 50},
                        {"steps", 6},
                        {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
                        {"model",
                         {{"type", "dlrm"},
                          {"dense_features", 13},
                          {"tables", tables},
                          {"bottom_mlp", {8, 4}},
                          {"top_mlp", {8}}}},
                        {"data",
                         {{"type", "criteo_tsv"},
                          {"path", (dir_ / "log.tsv").string()},
                          {"shuffle", false}}},  // in file order, as the stream
                        {"threads", 1}};
    CommandResult r = train_run(j, "file", "");
    ASSERT_EQ(r.code, 0) << r.output;
    std::vector<uint64_t> ids = exported_ids(dir_ / "file/model.dynamic.safetensors", 0);
    EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()), want);
    EXPECT_EQ(ids.size(), want.size());
    j["data"] = {{"type", "criteo_tsv"}, {"stream", true}, {"path", (dir_ / "log.tsv").string()},
                 {"part_records", 100},  {"flush_s", 0.1}, {"idle_timeout_s", 0.5}};
    r = train_run(j, "stream", "");
    ASSERT_EQ(r.code, 0) << r.output;
    ids = exported_ids(dir_ / "stream/model.dynamic.safetensors", 0);
    EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()), want);
    EXPECT_EQ(read_tensors(dir_ / "stream/model.dynamic.safetensors"),
              read_tensors(dir_ / "file/model.dynamic.safetensors"));
}

}  // namespace
}  // namespace zt::testing
