// Streaming data as a user runs it (docs/streaming.md): `zerotrain data synth-ctr --stream` writes
// parts into a directory; "data": {"stream": true} trains them in arrival order, waits for parts
// that arrive while it trains and stops when none arrives for idle_timeout_s; a run killed with
// SIGKILL at random steps ten times and resumed each time ends with the uninterrupted run's
// losses and weights, bit for bit, after exactly the steps the records make (every record
// trained once), and progressive validation's window continues across the resumes; what a stream
// cannot be is refused before any work.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "cli/cli_fixture.h"
#include "data/click_test_util.h"
#include "util/error.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kPartRecords = 256, kBatch = 64;

class StreamCli : public Cli {
  protected:
    // Parts first .. first + files - 1 of the seeded stream into dir_/parts.
    CommandResult write_parts(int64_t files, int64_t first = 0, double rate = 0,
                              const std::string& tables = "300,200,50") {
        return zt::testing::run_zerotrain(
            zt::str_cat("data synth-ctr --stream ", (dir_ / "parts").string(), " --files ", files,
                        " --first-file ", first, " --rows ", kPartRecords, " --rate ", rate,
                        " --seed 5 --tables ", tables, " --drift 0.05 --threads 1"));
    }
    nlohmann::json config(double idle_timeout_s = 0.5) {
        return {{"train_micro_batch_size_per_gpu", kBatch / 4},
                {"train_batch_size", kBatch},
                {"steps", 100000},
                {"steps_per_print", 1},
                {"seed", 7},
                {"threads", 1},
                {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}}}}},
                {"model",
                 {{"type", "dlrm"},
                  {"dense_features", 13},
                  {"table_rows", {300, 200, 50}},
                  {"embedding_dim", 8},
                  {"bottom_mlp", {16, 8}},
                  {"top_mlp", {16, 8}}}},
                {"data",
                 {{"type", "ctr"},
                  {"stream", true},
                  {"path", (dir_ / "parts").string()},
                  {"idle_timeout_s", idle_timeout_s}}},
                {"checkpoint", {{"interval_steps", 3}}}};
    }
};

}  // namespace

TEST_F(StreamCli, KilledTenTimesEveryRecordIsTrainedOnceLikeTheUninterruptedRun) {
    ASSERT_EQ(write_parts(6).code, 0);
    const int64_t steps = 6 * kPartRecords / kBatch;  // 24
    const CommandResult full = train_run(config(), "full", "", 2);
    ASSERT_EQ(full.code, 0) << full.output;
    const RunLog ref = read_run("full");
    ASSERT_EQ(static_cast<int64_t>(ref.loss.size()), steps);
    for (double l : ref.loss) ASSERT_FALSE(std::isnan(l));

    // Ten kills at steps drawn (seeded) from what is left, each followed by --resume.
    const std::string cfg = write_config(config(), "killed.json");
    const std::string run = (dir_ / "killed").string();
    std::mt19937 rng(11);
    int64_t at = 3;  // the first kill after the first checkpoint (step 3)
    for (int kill = 0; kill < 10; ++kill) {
        at = std::min<int64_t>(steps - 1, at + 1 + static_cast<int64_t>(rng() % 3));
        const CommandResult r = zt::testing::run_command(
            zt::str_cat("ZT_FAULT=kill:step=", at, " ", ZT_BINARY, " train ", cfg,
                        " --quiet --run-dir ", run, " --ranks 2", kill > 0 ? " --resume" : ""));
        ASSERT_EQ(r.code, 128 + 9) << "kill " << kill << " at step " << at << ": " << r.output;
    }
    const CommandResult last = zt::testing::run_command(
        zt::str_cat(ZT_BINARY, " train ", cfg, " --quiet --run-dir ", run, " --ranks 2 --resume"));
    ASSERT_EQ(last.code, 0) << last.output;
    const RunLog got = read_run("killed");
    EXPECT_EQ(got.loss, ref.loss);
    EXPECT_EQ(got.weights, ref.weights);
    // The progressive validation window is in the checkpoints: the last line's figures are the
    // uninterrupted run's, over the whole window.
    const nlohmann::json want = step_lines("full").back()["progressive"];
    EXPECT_EQ(want["samples"], steps * kBatch);
    EXPECT_EQ(step_lines("killed").back()["progressive"], want);
}

// The same, with SIGKILL at random moments of wall-clock time instead of at step boundaries: a
// kill may land during start-up, a resume's load, a step, an asynchronous checkpoint's write or
// the wait for more parts. `--resume auto` starts afresh when no checkpoint was completed yet.
TEST_F(StreamCli, KilledAtRandomMomentsTenTimesEveryRecordIsTrainedOnce) {
    ASSERT_EQ(write_parts(6).code, 0);
    const int64_t steps = 6 * kPartRecords / kBatch;
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(train_run(config(), "full", "", 2).code, 0);
    const double full_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const RunLog ref = read_run("full");
    ASSERT_EQ(static_cast<int64_t>(ref.loss.size()), steps);

    nlohmann::json j = config();
    j["checkpoint"]["async"] = true;
    const std::string cfg = write_config(j, "killed.json");
    const std::string run = (dir_ / "killed").string();
    const std::string train =
        zt::str_cat(ZT_BINARY, " train ", cfg, " --quiet --run-dir ", run, " --ranks 2 --resume auto");
    std::mt19937 rng(23);
    int kills = 0;
    for (int attempt = 0; attempt < 40 && kills < 10; ++attempt) {
        // Uniform over the uninterrupted run's wall time: every phase of a run gets hit.
        const double after_s = full_s * std::uniform_real_distribution<double>(0.05, 1.0)(rng);
        const CommandResult r =
            zt::testing::run_command(zt::str_cat("timeout -s KILL ", after_s, " ", train));
        if (r.code == 0) {  // it finished first: start over, so that the kills land mid-stream
            fs::remove_all(run);
            continue;
        }
        ASSERT_EQ(r.code, 128 + 9) << "kill " << kills << " after " << after_s << " s: " << r.output;
        ++kills;
    }
    ASSERT_EQ(kills, 10);
    const CommandResult last = zt::testing::run_command(train);
    ASSERT_EQ(last.code, 0) << last.output;
    const RunLog got = read_run("killed");
    EXPECT_EQ(got.loss, ref.loss);
    EXPECT_EQ(got.weights, ref.weights);
    EXPECT_EQ(step_lines("killed").back()["progressive"], step_lines("full").back()["progressive"]);
}

// Tiered tables on a stream read the next micro-batch's rows ahead (Note [Stream read-ahead] in
// dlrm_stream_data.cpp) where its records are in parts already opened, and train the bits of the
// same tables in memory.
TEST_F(StreamCli, TieredTablesReadTheNextRowsAheadAndTrainLikeTablesInMemory) {
    ASSERT_EQ(write_parts(4, 0, 0, "20000,200,50").code, 0);  // rows over many 4 KiB pages
    nlohmann::json j = config();
    j["model"]["table_rows"] = {20000, 200, 50};
    j["embedding"] = {{"sharding", {"row", "data_parallel", "data_parallel"}}};
    ASSERT_EQ(train_run(j, "mem", "", 2).code, 0);
    j["embedding"]["tier"] = {{"device", "cpu"}, {"cache_ratio", 0.05}};
    const CommandResult r = train_run(j, "tier", "", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog mem = read_run("mem"), tier = read_run("tier");
    ASSERT_EQ(static_cast<int64_t>(mem.loss.size()), 4 * kPartRecords / kBatch);
    EXPECT_EQ(tier.loss, mem.loss);
    EXPECT_EQ(tier.weights, mem.weights);
    int64_t read_ahead = 0, misses = 0;
    for (const nlohmann::json& l : step_lines("tier")) {
        ASSERT_TRUE(l["embedding"].contains("tier")) << l.dump();
        read_ahead += l["embedding"]["tier"]["prefetch_hits"].get<int64_t>();
        misses += l["embedding"]["tier"]["misses"].get<int64_t>();
    }
    EXPECT_GT(misses, 0);
    EXPECT_GT(read_ahead, 0);  // without read-ahead a stream's misses are all fetched on demand
}

// Parts that arrive while the run trains are waited for; the run trains them all, in order, as
// one that found them all there; the lines say how many records arrived and the freshness of
// each checkpoint (seconds from a record's arrival to a saved model that learned from it), with
// checkpoints every interval_seconds.
TEST_F(StreamCli, WaitsForPartsThatArriveWhileItTrains) {
    ASSERT_EQ(write_parts(2).code, 0);
    CommandResult late;
    std::thread writer([&] {  // once the run has trained a step: a part every 0.32 s
        auto trained = [&] {
            std::ifstream f(dir_ / "live" / "metrics.jsonl");
            std::string line;
            return static_cast<bool>(std::getline(f, line));  // a step's line
        };
        for (int i = 0; i < 6000 && !trained(); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        late = write_parts(3, 2, 800);
    });
    nlohmann::json j = config(2.0);
    // The freshness below needs checkpoints; asynchronous ones report it once visible.
    j["checkpoint"] = {{"interval_seconds", 0.1}, {"async", true}};
    const CommandResult r = train_run(j, "live", "", 1);
    writer.join();
    ASSERT_EQ(late.code, 0) << late.output;
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog live = read_run("live");
    ASSERT_EQ(static_cast<int64_t>(live.loss.size()), 5 * kPartRecords / kBatch);
    const std::vector<nlohmann::json> lines = step_lines("live");
    EXPECT_EQ(lines.back()["data"]["stream"]["records_arrived"], 5 * kPartRecords);
    EXPECT_EQ(lines.back()["data"]["stream"]["parts"], 5);
    bool fresh = false;
    for (const nlohmann::json& j : lines)
        if (j["data"]["stream"].contains("freshness_s")) {
            fresh = true;
            EXPECT_GE(j["data"]["stream"]["freshness_s"].get<double>(), 0.0) << j.dump();
            EXPECT_LT(j["data"]["stream"]["freshness_s"].get<double>(), 60.0) << j.dump();
        }
    EXPECT_TRUE(fresh) << lines.back().dump();
    // The same records in the same order as a run that found every part there.
    ASSERT_EQ(train_run(config(), "all", "", 1).code, 0);
    const RunLog all = read_run("all");
    EXPECT_EQ(live.loss, all.loss);
    EXPECT_EQ(live.weights, all.weights);
}

// Progressive validation: every sample is scored by the training forward, before the step learns
// from it. With a window of one step's samples, a line's log loss is that step's own loss (the
// mean of the same binary cross-entropies over every rank's micro-batches), and its AUC is the
// AUC of those predictions; with a larger window the lines count the samples seen so far.
// checkpoint.interval_records: a checkpoint after the first step that brings the records
// trained since the last to N (64 a step, N = 150: every 3 steps), and one for the rest when the
// stream ends.
TEST_F(StreamCli, CheckpointsEveryNRecords) {
    ASSERT_EQ(write_parts(2).code, 0);  // 512 records: 8 steps
    nlohmann::json j = config();
    j["checkpoint"] = {{"interval_records", 150}};
    ASSERT_EQ(train_run(j, "rec", "", 1).code, 0);
    std::vector<std::string> got;
    for (const auto& e : fs::directory_iterator(dir_ / "rec" / "checkpoints"))
        if (e.is_directory()) got.push_back(e.path().filename().string());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, (std::vector<std::string>{"step_00000003", "step_00000006", "step_00000008"}));
}

TEST_F(StreamCli, ProgressiveValidationScoresEachSampleBeforeTrainingOnIt) {
    ASSERT_EQ(write_parts(2).code, 0);
    nlohmann::json j = config();
    j["data"]["progressive_window"] = kBatch;
    ASSERT_EQ(train_run(j, "step", "", 2).code, 0);
    const std::vector<nlohmann::json> lines = step_lines("step");
    ASSERT_EQ(static_cast<int64_t>(lines.size()), 2 * kPartRecords / kBatch);
    for (const nlohmann::json& l : lines) {
        ASSERT_TRUE(l.contains("progressive")) << l.dump();
        EXPECT_EQ(l["progressive"]["samples"], kBatch);
        EXPECT_NEAR(l["progressive"]["log_loss"].get<double>(), l["loss"].get<double>(),
                    1e-5 * l["loss"].get<double>())
            << l.dump();
        EXPECT_GT(l["progressive"]["auc"].get<double>(), 0.0);
        EXPECT_LT(l["progressive"]["auc"].get<double>(), 1.0);
    }
    j["data"]["progressive_window"] = 3 * kBatch;
    ASSERT_EQ(train_run(j, "window", "", 1).code, 0);
    int64_t step = 0;
    for (const nlohmann::json& l : step_lines("window"))
        EXPECT_EQ(l["progressive"]["samples"], std::min(++step, int64_t{3}) * kBatch);
}

// examples/dlrm-stream.json, shortened: the run writes its own drifting stream (a thread, into a
// temporary directory it removes) and trains the records' whole steps of it.
TEST_F(StreamCli, GeneratedStreamExampleShortened) {
    const fs::path tmp = dir_ / "tmp";  // the run's temporary directory, to see it cleaned
    fs::create_directories(tmp);
    const CommandResult r = zt::testing::run_command(
        zt::str_cat("TMPDIR=", tmp.string(), " ", ZT_BINARY, " train ", ZT_SOURCE_DIR,
                    "/examples/dlrm-stream.json --threads 1 --run-dir ", (dir_ / "ex").string(),
                    " --set data.records=6000 --set data.part_records=1000 --set data.rate=0",
                    " --set data.idle_timeout_s=0.5 --set checkpoint.interval_seconds=0",
                    " --set steps_per_print=1"));
    ASSERT_EQ(r.code, 0) << r.output;
    const std::vector<nlohmann::json> lines = step_lines("ex");
    EXPECT_EQ(lines.size(), 6000u / 512);
    EXPECT_EQ(lines.back()["data"]["stream"]["records_arrived"], 6000);
    EXPECT_EQ(lines.back()["progressive"]["samples"], 6000 / 512 * 512);
    EXPECT_TRUE(fs::is_empty(tmp)) << "the generated stream's directory was left behind";
    // The progress lines know no end (steps is only a cap): no ETA; the end is said.
    EXPECT_NE(r.output.find("step 1 | loss"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("ETA"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("the stream ended"), std::string::npos) << r.output;
    // A run killed while it writes its stream cannot remove the directory; the next run does
    // (Note [Orphaned temporary files]).
    const std::string slow = zt::str_cat(
        ZT_BINARY, " train ", ZT_SOURCE_DIR,
        "/examples/dlrm-stream.json --threads 1 --quiet --run-dir ", (dir_ / "killed").string(),
        " --set data.records=100000 --set data.part_records=1000 --set data.rate=2000");
    const CommandResult killed = zt::testing::run_command(
        zt::str_cat("TMPDIR=", tmp.string(), " timeout -s KILL 1.5 ", slow));
    ASSERT_EQ(killed.code, 128 + 9) << killed.output;
    EXPECT_FALSE(fs::is_empty(tmp));
    const CommandResult next = zt::testing::run_command(zt::str_cat(
        "TMPDIR=", tmp.string(), " ", ZT_BINARY, " train ", ZT_SOURCE_DIR,
        "/examples/dlrm-stream.json --threads 1 --quiet --run-dir ", (dir_ / "next").string(),
        " --set data.records=1000 --set data.part_records=1000 --set data.rate=0",
        " --set data.idle_timeout_s=0.2 --set checkpoint.interval_seconds=0"));
    ASSERT_EQ(next.code, 0) << next.output;
    for (const auto& e : fs::directory_iterator(tmp))
        ADD_FAILURE() << "the killed run's " << e.path() << " was left behind";
}

// Criteo TSV lines: from a file that keeps growing while the run trains (its second half, a line
// cut in two included, appended later), and from standard input; both train the same records in
// the same order, so both give the same model.
TEST_F(StreamCli, CriteoLinesFromAGrowingFileOrStandardInput) {
    const std::string text = zt::click_test::random_criteo_lines(512, 8);
    const size_t cut = text.size() / 2 + 5;
    std::ofstream(dir_ / "log.tsv") << text.substr(0, cut);
    nlohmann::json j = config(1.5);
    j["model"] = {
        {"type", "dlrm"},     {"dense_features", 13}, {"table_rows", std::vector<int64_t>(26, 61)},
        {"embedding_dim", 4}, {"bottom_mlp", {8, 4}}, {"top_mlp", {8, 4}}};
    j["data"] = {{"type", "criteo_tsv"}, {"stream", true}, {"path", (dir_ / "log.tsv").string()},
                 {"part_records", 100},  {"flush_s", 0.1}, {"idle_timeout_s", 1.5}};
    std::thread appender([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        std::ofstream(dir_ / "log.tsv", std::ios::app) << text.substr(cut);
    });
    const CommandResult grown = train_run(j, "grown", "", 1);
    appender.join();
    ASSERT_EQ(grown.code, 0) << grown.output;
    const RunLog a = read_run("grown");
    EXPECT_EQ(static_cast<int64_t>(a.loss.size()), 512 / kBatch);

    j["data"]["path"] = "-";
    const CommandResult piped = zt::testing::run_command(zt::str_cat(
        "cat ", (dir_ / "log.tsv").string(), " | ", ZT_BINARY, " train ",
        write_config(j, "piped.json"), " --quiet --run-dir ", (dir_ / "piped").string()));
    ASSERT_EQ(piped.code, 0) << piped.output;
    const RunLog b = read_run("piped");
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.weights, b.weights);
    // Or converted by a separate process (`data prepare-ctr - --stream`), trained as parts.
    std::string rows;
    for (int k = 0; k < 26; ++k) rows += k ? ",61" : "61";
    const CommandResult conv = zt::testing::run_command(zt::str_cat(
        "cat ", (dir_ / "log.tsv").string(), " | ", ZT_BINARY, " data prepare-ctr - --stream ",
        (dir_ / "tsv_parts").string(), " --rows 100 --table-rows ", rows));
    ASSERT_EQ(conv.code, 0) << conv.output;
    EXPECT_NE(conv.output.find("wrote 6 parts"), std::string::npos) << conv.output;
    nlohmann::json c = j;
    c["data"] = {{"type", "ctr"},
                 {"stream", true},
                 {"path", (dir_ / "tsv_parts").string()},
                 {"idle_timeout_s", 0.3}};
    ASSERT_EQ(train_run(c, "parts", "", 1).code, 0);
    EXPECT_EQ(read_run("parts").weights, a.weights);
    // Standard input reaches one process: several ranks are refused.
    const CommandResult two = train_run(j, "two", "", 2);
    EXPECT_EQ(two.code, 2) << two.output;
    EXPECT_NE(two.output.find("standard input reaches one process"), std::string::npos)
        << two.output;
}

TEST_F(StreamCli, WhatIsNotAStreamIsRefusedBeforeAnyWork) {
    ASSERT_EQ(write_parts(1).code, 0);
    struct Case {
        std::string name;
        nlohmann::json data;
        const char* says;
    };
    const std::string parts = (dir_ / "parts").string();
    const std::vector<Case> cases = {
        {"tsv",
         {{"type", "criteo_tsv"}, {"stream", true}, {"path", parts}},
         "Criteo lines have 13 dense features and 26 categorical ones; the model has 13 and 3"},
        {"flush",
         {{"type", "ctr"}, {"stream", true}, {"path", parts}, {"flush_s", 1}},
         "only a Criteo TSV stream uses it"},
        {"rate",
         {{"type", "ctr"}, {"stream", true}, {"path", parts}, {"rate", 10}},
         "only a generated stream"},
        {"shuffle",
         {{"type", "ctr"}, {"stream", true}, {"path", parts}, {"shuffle", true}},
         "a stream trains in arrival order"},
        {"fraction",
         {{"type", "ctr"}, {"stream", true}, {"path", parts}, {"eval_fraction", 0.1}},
         "a stream holds nothing back"},
        {"timeout",
         {{"type", "ctr"}, {"path", parts}, {"idle_timeout_s", 3}},
         "only a stream (data.stream true) uses it"},
        {"file",
         {{"type", "ctr"}, {"stream", true}, {"path", parts + "/part-000000.ztclick"}},
         "is not a directory"},
    };
    for (const Case& c : cases) {
        nlohmann::json j = config();
        j["data"] = c.data;
        const CommandResult r = train_run(j, c.name, "", 1);
        EXPECT_EQ(r.code, 2) << c.name << r.output;
        EXPECT_NE(r.output.find(c.says), std::string::npos) << c.name << r.output;
        EXPECT_FALSE(fs::exists(dir_ / c.name / "model.safetensors")) << c.name;
    }
    // A part whose layout is not the model's is named.
    nlohmann::json j = config();
    j["model"]["table_rows"] = {300, 200};
    const CommandResult r = train_run(j, "layout", "", 1);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("part-000000.ztclick has 13 dense features and 3 tables"),
              std::string::npos)
        << r.output;
}
