// `zerotrain data synth-ctr` and `zerotrain data prepare-ctr` (docs/click-data.md): success paths
// and exit code 2 with a message naming the option, file or line for bad input.
#include <gtest/gtest.h>

#include "cli/cli_fixture.h"
#include "data/click/ctr_file.h"
#include "data/click/synth_ctr.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
using zt::testing::run_zerotrain;

namespace {

class DataCtr : public Cli {
  protected:
    std::string path(const std::string& name) const { return (dir_ / name).string(); }
    // n good Criteo lines, each with every categorical field "a1" and every dense field "3".
    std::string write_tsv(const std::string& name, int n, const std::string& extra = "") {
        std::string good = "1";
        for (int i = 0; i < 13; ++i) good += "\t3";
        for (int i = 0; i < 26; ++i) good += "\ta1";
        std::ofstream f(path(name));
        for (int i = 0; i < n; ++i) f << good << "\n";
        f << extra;
        return path(name);
    }
};

TEST_F(DataCtr, SynthWritesFilesAndTeacherJson) {
    CommandResult r = run_zerotrain("data synth-ctr --rows 3000 --eval-rows 1000 --seed 4 --out " +
                                    path("t.ctr") + " --eval-out " + path("e.ctr") +
                                    " --kaggle-tables --max-rows 1000 --threads 2");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("teacher on eval records: auc 0."), std::string::npos) << r.output;
    std::ifstream jf(path("t.ctr.json"));
    ASSERT_TRUE(jf.good());
    const nlohmann::json j = nlohmann::json::parse(jf);
    EXPECT_EQ(j["records"], 3000);
    EXPECT_EQ(j["eval_records"], 1000);
    ASSERT_EQ(j["table_rows"].size(), 26u);
    EXPECT_EQ(j["table_rows"][0], 1000);  // 1460 capped
    EXPECT_EQ(j["table_rows"][8], 3);
    EXPECT_GT(j["teacher_auc"].get<double>(), 0.6);
    EXPECT_GT(j["positive_rate"].get<double>(), 0.1);
    EXPECT_TRUE(std::filesystem::exists(path("e.ctr")));

    r = run_zerotrain("data synth-ctr --rows 100 --seed 1 --out " + path("s.ctr") +
                      " --tables 10,20 --dense 2 --hotness 3 --zipf 1.2");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("teacher on train records"), std::string::npos) << r.output;

    // Raw 64-bit ids for every table, or for some (the file's rows 0, docs/click-data.md): the
    // plain file's draws under synth_raw_id.
    r = run_zerotrain("data synth-ctr --rows 100 --seed 1 --out " + path("p.ctr") +
                      " --tables 10,20");
    ASSERT_EQ(r.code, 0) << r.output;
    const auto plain = zt::CtrFile::open(path("p.ctr"));
    for (const auto& [flag, raw] : std::vector<std::pair<std::string, std::vector<bool>>>{
             {"--raw-ids", {true, true}}, {"--raw-tables 1", {false, true}}}) {
        r = run_zerotrain("data synth-ctr --rows 100 --seed 1 --out " + path("r.ctr") +
                          " --tables 10,20 " + flag);
        ASSERT_EQ(r.code, 0) << r.output;
        const auto f = zt::CtrFile::open(path("r.ctr"));
        for (int k = 0; k < 2; ++k) {
            ASSERT_EQ(f->raw_ids(k), raw[static_cast<size_t>(k)]) << flag << " table " << k;
            const auto want = plain->ids32(k);
            for (size_t p = 0; p < want.size(); ++p)
                EXPECT_EQ(f->raw_ids(k) ? f->ids64(k)[p] : f->ids32(k)[p],
                          f->raw_ids(k) ? zt::synth_raw_id(k, want[p]) : want[p]);
        }
        const nlohmann::json j = nlohmann::json::parse(std::ifstream(path("r.ctr.json")));
        EXPECT_EQ(j["raw_ids"], nlohmann::json(raw)) << flag;
    }
}

TEST_F(DataCtr, SynthBadOptionsExit2) {
    const std::string out = " --out " + path("t.ctr");
    struct Case {
        std::string args, what;
    };
    for (const Case& c : std::vector<Case>{
             {"--rows 10 --seed 1" + out, "--kaggle-tables"},  // no tables at all
             {"--rows 10 --seed 1 --tables 5 --kaggle-tables" + out, "exactly one"},
             {"--rows 10 --seed 1 --tables 5,x" + out, "\"x\""},
             {"--rows 10 --seed 1 --tables 5,0" + out, "\"0\""},
             {"--rows 0 --seed 1 --tables 5" + out, "--rows"},
             {"--rows 10 --seed 1 --tables 5 --eval-rows 5" + out, "--eval-out"},
             {"--rows 10 --seed 1 --tables 5 --hotness 0" + out, "hotness"},
             {"--rows 10 --seed 1 --tables 5 --out " + path("no/such/dir/t.ctr"), "no/such/dir"},
             {"--rows 10 --seed 1 --tables 5 --raw-tables 1" + out, "--raw-tables: \"1\""},
             {"--rows 10 --seed 1 --tables 5 --raw-ids --raw-tables 0" + out, "not both"},
         }) {
        CommandResult r = run_zerotrain("data synth-ctr " + c.args);
        EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
        EXPECT_NE(r.output.find(c.what), std::string::npos) << c.args << "\n" << r.output;
    }
}

TEST_F(DataCtr, PrepareConvertsWithProgressAndSkips) {
    const std::string in = write_tsv("in.tsv", 5);
    CommandResult r = run_zerotrain("data prepare-ctr " + in + " " + path("o.ctr") +
                                    " --kaggle-tables --max-rows 100");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("5 records"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("prepare-ctr: "), std::string::npos) << r.output;  // progress
    EXPECT_TRUE(std::filesystem::exists(path("o.ctr")));

    const std::string bad = write_tsv("bad.tsv", 3, "1\t2\n");
    std::string rows = "5";
    for (int i = 1; i < 26; ++i) rows += ",5";
    r = run_zerotrain("data prepare-ctr " + bad + " " + path("o.ctr") + " --table-rows " + rows +
                      " --on-bad-record skip");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("3 records (1 bad lines skipped)"), std::string::npos) << r.output;
}

TEST_F(DataCtr, PrepareBadInputExit2) {
    const std::string bad = write_tsv("bad.tsv", 3, "1\t2\n");
    CommandResult r =
        run_zerotrain("data prepare-ctr " + bad + " " + path("o.ctr") + " --kaggle-tables");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(bad + ":4: 2 tab-separated columns"), std::string::npos) << r.output;

    std::ofstream(path("empty.tsv")).close();
    r = run_zerotrain("data prepare-ctr " + path("empty.tsv") + " " + path("o.ctr") +
                      " --kaggle-tables");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("empty.tsv is empty"), std::string::npos) << r.output;

    r = run_zerotrain("data prepare-ctr " + bad + " " + path("o.ctr") + " --table-rows 5,5");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("--table-rows: 2 sizes"), std::string::npos) << r.output;

    r = run_zerotrain("data prepare-ctr " + bad + " " + path("o.ctr") +
                      " --kaggle-tables --on-bad-record maybe");
    EXPECT_EQ(r.code, 2) << r.output;
    r = run_zerotrain("data prepare-ctr " + path("missing.tsv") + " " + path("o.ctr") +
                      " --kaggle-tables");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("missing.tsv"), std::string::npos) << r.output;
}

}  // namespace
