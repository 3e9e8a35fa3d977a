// Incremental checkpoints of dynamic tables (checkpoint.incremental.full_every, Note [Incremental
// checkpoints]): a run resumed from a chain (a full checkpoint and increments) continues bit for
// bit, on one rank (chains written synchronously and asynchronously) and on two (threads, and
// under mpirun like threads); a 2-rank chain resumed on one process holds the state the 2-rank
// full checkpoint holds (the same continuation, bit for bit); keep_last keeps the checkpoints a
// kept increment needs, and a missing or damaged base is named; an increment is much smaller than
// a full checkpoint when few rows change; wrong keys exit 2.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "checkpoint/manifest.h"
#include "checkpoint/safetensors.h"
#include "cli_fixture.h"
#include "dlrm_cli_util.h"
#include "runtime/checkpoint_chain.h"

namespace zt::testing {
namespace {

nlohmann::json incremental_config() {
    return {
        {"train_micro_batch_size_per_gpu", 32},
        {"gradient_accumulation_steps", 2},
        {"steps", 12},
        {"steps_per_print", 1},
        {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
        {"model",
         {{"type", "dlrm"},
          {"tables",
           {{{"rows", 300}, {"dim", 8}},
            {{"dynamic", true},
             {"dim", 8},
             {"id_range", 5000},
             {"min_count", 2},
             {"evict", {{"unseen_steps", 4}, {"max_rows", 300}, {"policy", "lfu"}}},
             {"unadmitted", "default_row"}}}},
          {"bottom_mlp", {16, 8}},
          {"top_mlp", {16}}}},
        {"embedding", {{"optimizer", {{"type", "adagrad"}, {"lr", 0.05}}}}},
        {"data", {{"type", "synthetic"}, {"records", 4000}, {"eval_records", 0}, {"hotness", 2}}},
        {"checkpoint", {{"interval_steps", 2}, {"incremental", {{"full_every", 3}}}}},
        {"threads", 1}};
}

std::vector<std::string> checkpoint_dirs(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_directory()) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

TEST_F(Cli, IncrementalChainResumesBitForBit) {
    const nlohmann::json j = incremental_config();  // checkpoints 2 F, 4 I, 6 I, 8 F, 10 I, 12 I
    ASSERT_EQ(train_run(j, "full", "").code, 0);
    nlohmann::json part = j;
    part["steps"] = 6;
    ASSERT_EQ(train_run(part, "part", "").code, 0);
    const fs::path ck = dir_ / "part/checkpoints";
    EXPECT_TRUE(chain_names(ck / "step_00000002").empty());  // full
    EXPECT_EQ(chain_names(ck / "step_00000006"),
              (std::vector<std::string>{"step_00000002", "step_00000004"}));
    const CommandResult r = train_run(j, "part", "--resume");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(chain_names(ck / "step_00000012"),
              (std::vector<std::string>{"step_00000008", "step_00000010"}));
    const RunLog a = read_run("full"), b = read_run("part");
    ASSERT_EQ(a.loss.size(), 12u);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.weights, b.weights);
    const auto rows = read_tensors(dir_ / "full/model.dynamic.safetensors");
    EXPECT_EQ(rows, read_tensors(dir_ / "part/model.dynamic.safetensors"));
    EXPECT_GT(step_lines("full")
                  .back()["embedding"]["dynamic_tables"]["emb_l.1.weight"]["evictions"]
                  .get<int64_t>(),
              0);
    // Written asynchronously (the deltas are staged with the rest), the chain resumes the same.
    nlohmann::json async = part;
    async["checkpoint"]["async"] = true;
    ASSERT_EQ(train_run(async, "async", "").code, 0);
    EXPECT_EQ(chain_names(dir_ / "async/checkpoints/step_00000006"),
              (std::vector<std::string>{"step_00000002", "step_00000004"}));
    async["steps"] = 12;
    ASSERT_EQ(train_run(async, "async", "--resume").code, 0);
    EXPECT_EQ(read_run("async").loss, a.loss);
    EXPECT_EQ(read_tensors(dir_ / "async/model.dynamic.safetensors"), rows);
    // `export --from` the last checkpoint (an increment on 8 and 10): the run's own export.
    const CommandResult e = run_zerotrain(str_cat("export ", (dir_ / "full.json").string(),
                                                  " --from ", (dir_ / "full").string(), " --out ",
                                                  (dir_ / "x.safetensors").string()));
    ASSERT_EQ(e.code, 0) << e.output;
    EXPECT_EQ(read_tensors(dir_ / "x.dynamic.safetensors"), rows);
    // The metrics say what each checkpoint wrote, on the line of the step after it.
    std::map<int64_t, std::string> kinds;
    for (const nlohmann::json& l : step_lines("full"))
        if (l.contains("checkpoint")) kinds[l["checkpoint"]["step"]] = l["checkpoint"]["kind"];
    EXPECT_EQ(kinds, (std::map<int64_t, std::string>{{2, "full"},
                                                     {4, "incremental"},
                                                     {6, "incremental"},
                                                     {8, "full"},
                                                     {10, "incremental"}}));
}

TEST_F(Cli, IncrementalChainOnTwoRanksResumesAndReshardsToOne) {
    nlohmann::json j = incremental_config();
    j["steps"] = 8;
    j["embedding"]["optimizer"] = {{"type", "rowwise_adagrad"}, {"lr", 0.05}};
    j["checkpoint"]["incremental"]["full_every"] = 4;  // 2 F, 4 I, 6 I, 8 I
    ASSERT_EQ(train_run(j, "two", "", 2).code, 0);
    nlohmann::json part = j;
    part["steps"] = 6;
    ASSERT_EQ(train_run(part, "part", "", 2).code, 0);
    EXPECT_EQ(chain_names(dir_ / "part/checkpoints/step_00000006"),
              (std::vector<std::string>{"step_00000002", "step_00000004"}));
    copy_checkpoints(dir_ / "part", dir_ / "back",
                     {"step_00000002", "step_00000004", "step_00000006"});
    CommandResult r = train_run(j, "part", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(read_run("part").loss, read_run("two").loss);
    EXPECT_EQ(read_run("part").weights, read_run("two").weights);
    EXPECT_EQ(read_tensors(dir_ / "part/model.dynamic.safetensors"),
              read_tensors(dir_ / "two/model.dynamic.safetensors"));

    // 2 ranks -> 1: the chain's state is the 2-rank full checkpoint's, so one process resumed from
    // either continues with the same bits (rows, optimizer state, counts, pending ids, log).
    nlohmann::json plain = part;
    plain["checkpoint"].erase("incremental");
    ASSERT_EQ(train_run(plain, "plain", "", 2).code, 0);
    copy_checkpoints(dir_ / "plain", dir_ / "backfull", {"step_00000006"});
    nlohmann::json one = j;
    one["gradient_accumulation_steps"] = 4;  // the same global batch
    r = train_run(one, "back", "--resume");
    ASSERT_EQ(r.code, 0) << r.output;
    r = train_run(one, "backfull", "--resume");
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog a = read_run("back"), b = read_run("backfull");
    ASSERT_EQ(a.loss.size(), 8u);  // steps 7 and 8: the copied run directories had no metrics
    EXPECT_EQ(std::vector<double>(a.loss.begin() + 6, a.loss.end()),
              std::vector<double>(b.loss.begin() + 6, b.loss.end()));
    EXPECT_EQ(a.weights, b.weights);
    const auto ra = read_tensors(dir_ / "back/model.dynamic.safetensors");
    EXPECT_FALSE(ra.at("emb_l.1.ids").empty());
    EXPECT_EQ(ra, read_tensors(dir_ / "backfull/model.dynamic.safetensors"));
    // The one-process run started a chain of its own: step 8 is full.
    EXPECT_TRUE(chain_names(dir_ / "back/checkpoints/step_00000008").empty());
}

TEST_F(Cli, IncrementalChainOverMpirunResumesLikeThreads) {
    nlohmann::json j = incremental_config();
    j["steps"] = 6;
    j["checkpoint"]["incremental"]["full_every"] = 4;  // 2 F, 4 I, 6 I
    ASSERT_EQ(train_run(j, "threads", "", 2).code, 0);
    nlohmann::json part = j;
    part["steps"] = 4;
    const CommandResult p = mpirun_train(part, "mpi");
    ASSERT_EQ(p.code, 0) << p.output;
    const CommandResult r = run_command(
        str_cat(kMpiEnv, "timeout 120 mpirun --oversubscribe --mca btl self,vader -np 2 ",
                ZT_BINARY, " train ", write_config(j, "mpi.json"), " --quiet --resume --run-dir ",
                (dir_ / "mpi").string()));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(chain_names(dir_ / "mpi/checkpoints/step_00000006"),
              (std::vector<std::string>{"step_00000002", "step_00000004"}));
    EXPECT_EQ(read_run("mpi").loss, read_run("threads").loss);
    EXPECT_EQ(read_tensors(dir_ / "mpi/model.dynamic.safetensors"),
              read_tensors(dir_ / "threads/model.dynamic.safetensors"));
}

TEST_F(Cli, IncrementalRetentionKeepsTheBaseAndNamesAMissingOne) {
    nlohmann::json j = incremental_config();
    j["steps"] = 5;
    j["checkpoint"] = {{"interval_steps", 1},
                       {"keep_last", 1},
                       {"incremental", {{"full_every", 3}}}};  // 1 F, 2 I, 3 I, 4 F, 5 I
    ASSERT_EQ(train_run(j, "run", "").code, 0);
    const fs::path ck = dir_ / "run/checkpoints";
    EXPECT_EQ(checkpoint_dirs(ck), (std::vector<std::string>{"step_00000004", "step_00000005"}));
    j["steps"] = 6;
    CommandResult r = train_run(j, "run", "--resume");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(checkpoint_dirs(ck),
              (std::vector<std::string>{"step_00000004", "step_00000005", "step_00000006"}));
    EXPECT_EQ(chain_names(ck / "step_00000006"),
              (std::vector<std::string>{"step_00000004", "step_00000005"}));

    // A damaged base: its manifest edited. Every checkpoint needs it: resume names it.
    j["steps"] = 7;
    {
        std::fstream f(ck / "step_00000004/manifest.json",
                       std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(40);
        f.put('#');
    }
    r = train_run(j, "run", "--resume");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("base (full) checkpoint step_00000004 is damaged"), std::string::npos)
        << r.output;
    // A missing base.
    fs::remove_all(ck / "step_00000004");
    r = train_run(j, "run", "--resume");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("base (full) checkpoint step_00000004 is missing"), std::string::npos)
        << r.output;
}

TEST_F(Cli, IncrementIsSmallerWhenFewRowsChange) {
    // Rows accumulate (no eviction); each step sights about 16 ids, a small part of them.
    nlohmann::json j = incremental_config();
    j["steps"] = 24;
    j["gradient_accumulation_steps"] = 1;
    j["train_micro_batch_size_per_gpu"] = 8;
    j["model"]["tables"][1] = {{"dynamic", true}, {"dim", 8}, {"id_range", 3000}};
    j["checkpoint"] = {{"interval_steps", 1}, {"incremental", {{"full_every", 8}}}};
    ASSERT_EQ(train_run(j, "run", "").code, 0);
    std::map<int64_t, std::pair<std::string, int64_t>> wrote;
    for (const nlohmann::json& l : step_lines("run"))
        if (l.contains("checkpoint"))
            wrote[l["checkpoint"]["step"]] = {l["checkpoint"]["kind"],
                                              l["checkpoint"]["dynamic_bytes"]};
    ASSERT_EQ(wrote.size(), 23u);  // steps 1 to 23 (24 has no line after it)
    EXPECT_EQ(wrote[17].first, "full");
    const int64_t full = wrote[17].second;
    const auto m = read_manifest((dir_ / "run/checkpoints/step_00000017").string());
    EXPECT_EQ(m.trainer["sparse"]["incremental_bytes"]["bytes"].get<int64_t>(), full);
    int64_t most = 0;
    for (int64_t s = 18; s <= 23; ++s) {
        EXPECT_EQ(wrote[s].first, "incremental") << s;
        most = std::max(most, wrote[s].second);
    }
    std::printf("dynamic table bytes: full %lld at step 17, increments after it at most %lld\n",
                static_cast<long long>(full), static_cast<long long>(most));
    EXPECT_LT(most * 4, full);  // measured: 12560 against 1544 at most
    // The sparse files on disk follow: the increment's is the smaller.
    EXPECT_LT(fs::file_size(dir_ / "run/checkpoints/step_00000023/sparse_rank_00000.bin") * 4,
              fs::file_size(dir_ / "run/checkpoints/step_00000017/sparse_rank_00000.bin"));
}

TEST_F(Cli, IncrementalConfigErrorsExit2) {
    nlohmann::json j = incremental_config();
    j["steps"] = 2;
    j["checkpoint"]["incremental"] = nlohmann::json::object();
    CommandResult r = train_run(j, "bad", "");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("checkpoint.incremental.full_every: required"), std::string::npos)
        << r.output;
    j["checkpoint"]["incremental"] = {{"full_every", 0}};
    r = train_run(j, "bad", "");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("checkpoint.incremental.full_every"), std::string::npos) << r.output;
    // A model without sharded or dynamic tables: said, and every checkpoint is full.
    nlohmann::json g = tiny();
    g["checkpoint"] = {{"interval_steps", 1}, {"incremental", {{"full_every", 2}}}};
    r = train_run(g, "gpt", "");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("no sharded or dynamic embedding tables"), std::string::npos)
        << r.output;
}

}  // namespace
}  // namespace zt::testing
