// Dynamic tables on a tier from the command line (docs/embedding-tier.md, "Dynamic tables"): a DLRM
// whose dynamic tables (expiry and an LRU cap, an LFU cap, a default row) live on host memory or
// in swap files behind a cache of a few percent of their slots trains on 2 ranks to the same bytes
// as in memory (weights, key-value export, checkpoints), with misses, evictions, write-backs and
// moved rows in its metrics and no swap file left; with static tables tiered beside them too; a
// tiered run resumed from its (incremental) checkpoint, and one killed in the middle of a
// write-back and resumed, end with the same bytes.
#include <gtest/gtest.h>

#include <fstream>

#include "cli_fixture.h"
#include "dlrm_cli_util.h"
#include "util/error.h"

namespace zt::testing {
namespace {

nlohmann::json dyn_tier_config() {
    return {
        {"train_micro_batch_size_per_gpu", 32},
        {"gradient_accumulation_steps", 2},
        {"steps", 8},
        {"steps_per_print", 1},
        {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
        {"model",
         {{"type", "dlrm"},
          {"tables",
           {{{"rows", 3001}, {"dim", 8}},
            {{"dynamic", true},
             {"dim", 8},
             {"evict", {{"unseen_steps", 3}, {"max_rows", 600}}},
             {"unadmitted", "default_row"}},
            {{"dynamic", true},
             {"dim", 8},
             {"id_range", 5000},
             {"min_count", 2},
             {"evict", {{"max_rows", 500}, {"policy", "lfu"}}}},
            {{"rows", 40}, {"dim", 8}, {"pooling", "mean"}}}},
          {"bottom_mlp", {16, 8}},
          {"top_mlp", {16}}}},
        {"embedding",
         {{"sharding", {"data_parallel", "auto", "auto", "data_parallel"}},
          {"optimizer", {{"type", "adagrad"}, {"lr", 0.05}}}}},
        {"data", {{"type", "synthetic"}, {"records", 4000}, {"eval_records", 64}, {"hotness", 2}}},
        {"eval_interval", 4},
        {"eval_iters", 1},
        {"checkpoint", {{"interval_steps", 4}}},
        {"threads", 1}};
}

nlohmann::json with_tier(nlohmann::json j, const std::string& device, const std::string& policy,
                         const fs::path& dir) {
    j["embedding"]["tier"] = {{"device", device}, {"cache_ratio", 0.02}, {"policy", policy}};
    if (device == "nvme") j["embedding"]["tier"]["nvme_path"] = dir.string();
    return j;
}

// The run's outputs that must not depend on the tier: weights, the key-value export, and the
// sparse files (rows, state, ids, counters) of its last checkpoint.
std::vector<std::string> outputs(const fs::path& run) {
    std::vector<std::string> out = {slurp(run / "model.safetensors"),
                                    slurp(run / "model.dynamic.safetensors")};
    for (const char* f : {"sparse_rank_00000.bin", "sparse_rank_00001.bin"})
        out.push_back(slurp(run / "checkpoints/step_00000008" / f));
    return out;
}

void expect_no_swap_files(const fs::path& dir) {
    for (const auto& e : fs::directory_iterator(dir))
        EXPECT_EQ(e.path().filename().string().find("zerotrain-swap-"), std::string::npos)
            << e.path();
}

TEST_F(Cli, DynamicTablesOnATierTrainBitForBitLikeTablesInMemory) {
    const nlohmann::json j = dyn_tier_config();
    ASSERT_EQ(train_run(j, "mem", "", 2).code, 0);
    const std::vector<std::string> want = outputs(dir_ / "mem");
    for (const std::string& s : want) ASSERT_FALSE(s.empty());
    for (const char* device : {"cpu", "nvme"}) {
        for (const char* policy : {"lru", "lfu"}) {
            SCOPED_TRACE(str_cat(device, " ", policy));
            const std::string run = str_cat(device, "-", policy);
            const CommandResult r = run_zerotrain(
                str_cat("train ", write_config(with_tier(j, device, policy, dir_), run + ".json"),
                        " --ranks 2 --run-dir ", (dir_ / run).string()));
            ASSERT_EQ(r.code, 0) << r.output;
            EXPECT_NE(r.output.find("embedding.tier: this rank's dynamic rows on"),
                      std::string::npos)
                << r.output;
            EXPECT_TRUE(outputs(dir_ / run) == want);
            int64_t misses = 0, evictions = 0, writebacks = 0, moved = 0, fresh = 0;
            int64_t cache = 0, rows = 0;
            for (const nlohmann::json& line : step_lines(run)) {
                const nlohmann::json& e = line["embedding"];
                const nlohmann::json& t = e["tier"];
                // Every distinct id an owner was asked for that is a row is one fetched row.
                EXPECT_EQ(
                    t["lookups"].get<int64_t>(),
                    e["dynamic_ids"].get<int64_t>() - e["dynamic_ids_unadmitted"].get<int64_t>());
                misses += t["misses"].get<int64_t>();
                evictions += t["evictions"].get<int64_t>();
                writebacks += t["writebacks"].get<int64_t>();
                moved += t["moved_rows"].get<int64_t>();
                fresh += t["new_rows"].get<int64_t>();
                cache = t["cache_rows"].get<int64_t>();
                rows = e["dynamic_tables"]["emb_l.1.weight"]["rows"].get<int64_t>() +
                       e["dynamic_tables"]["emb_l.2.weight"]["rows"].get<int64_t>();
            }
            EXPECT_GT(misses, fresh);  // some rows came back from the tier
            EXPECT_GT(fresh, 0);
            EXPECT_GT(evictions, 0);
            EXPECT_GT(writebacks, 0);
            EXPECT_GT(moved, 0);  // evictions moved the last rows into the holes
            EXPECT_LT(cache, rows);
        }
    }
    // Static tables tiered beside them (the rows split over the ranks): one "tier" figure.
    nlohmann::json mixed = j;
    mixed["model"]["tables"][0]["rows"] = 30001;
    mixed["embedding"]["sharding"] = {"row", "auto", "auto", "data_parallel"};
    ASSERT_EQ(train_run(mixed, "mixed-mem", "", 2).code, 0);
    ASSERT_EQ(train_run(with_tier(mixed, "nvme", "lru", dir_), "mixed", "", 2).code, 0);
    EXPECT_TRUE(outputs(dir_ / "mixed") == outputs(dir_ / "mixed-mem"));
    for (const nlohmann::json& line : step_lines("mixed")) {
        const nlohmann::json& e = line["embedding"];
        EXPECT_EQ(e["tier"]["lookups"].get<int64_t>(),
                  e["embedding_unique_ids"].get<int64_t>() + e["dynamic_ids"].get<int64_t>() -
                      e["dynamic_ids_unadmitted"].get<int64_t>());
    }
    expect_no_swap_files(dir_);
}

TEST_F(Cli, TieredDynamicTablesResumeAndSurviveAKillInAWriteBack) {
    nlohmann::json j = dyn_tier_config();
    j["checkpoint"] = {{"interval_steps", 2}, {"incremental", {{"full_every", 2}}}};
    ASSERT_EQ(train_run(j, "mem", "", 2).code, 0);
    const std::vector<std::string> want = outputs(dir_ / "mem");
    const nlohmann::json t = with_tier(j, "nvme", "lru", dir_);
    // Stopped at step 6 (an increment on the full checkpoint of step 4) and resumed.
    nlohmann::json part = t;
    part["steps"] = 6;
    ASSERT_EQ(train_run(part, "part", "", 2).code, 0);
    EXPECT_EQ(chain_names(dir_ / "part/checkpoints/step_00000004").size(), 1u);  // an increment
    CommandResult r = train_run(t, "part", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(outputs(dir_ / "part") == want);
    // Killed while rank 1 writes evicted rows back in step 6, resumed from step 4.
    const std::string cfg = write_config(t, "killed.json");
    const fs::path run = dir_ / "killed";
    const CommandResult killed =
        run_command(str_cat("ZT_FAULT=kill_in_writeback:step=6:rank=1 ", ZT_BINARY, " train ", cfg,
                            " --ranks 2 --quiet --run-dir ", run.string(), " 2>&1"));
    ASSERT_NE(killed.code, 0) << killed.output;
    EXPECT_NE(killed.output.find("while writing evicted embedding rows back in step 6"),
              std::string::npos)
        << killed.output;
    EXPECT_FALSE(fs::exists(run / "model.safetensors"));
    r = run_zerotrain(str_cat("train ", cfg, " --ranks 2 --resume --run-dir ", run.string()));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("at step 4"), std::string::npos) << r.output;
    EXPECT_TRUE(outputs(run) == want);
    expect_no_swap_files(dir_);  // the killed run's files were reclaimed by the resumed one
}

}  // namespace
}  // namespace zt::testing

namespace zt::testing {
namespace {

TEST_F(Cli, DynamicTierCacheBytesAndRefusals) {
    // cache_bytes: the same cache rows for both tables (4 KiB / 2 x 64 bytes = 32 rows, grown to
    // hold a step's), bit for bit.
    nlohmann::json j = dyn_tier_config();
    j["steps"] = 4;
    ASSERT_EQ(train_run(j, "mem", "", 2).code, 0);
    nlohmann::json t = j;
    t["embedding"]["tier"] = {{"device", "cpu"}, {"cache_bytes", 4096}};
    CommandResult r = run_zerotrain(str_cat("train ", write_config(t, "bytes.json"),
                                            " --ranks 2 --run-dir ", (dir_ / "bytes").string()));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("lru cache of 32 rows a table"), std::string::npos) << r.output;
    EXPECT_EQ(slurp(dir_ / "bytes/model.dynamic.safetensors"),
              slurp(dir_ / "mem/model.dynamic.safetensors"));
    // Static tables tiered too: cache_bytes would be counted twice.
    t["embedding"]["sharding"] = {"row", "auto", "auto", "data_parallel"};
    r = train_run(t, "mixed", "", 2);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("embedding.tier.cache_bytes: this model tiers both"), std::string::npos)
        << r.output;
    // Pieces split static tables' checkpoints only: with no static table tiered, refused.
    t = with_tier(j, "cpu", "lru", dir_);
    t["embedding"]["tier"]["checkpoint_piece_bytes"] = 4096;
    r = train_run(t, "pieces", "", 2);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("embedding.tier.checkpoint_piece_bytes: it splits"), std::string::npos)
        << r.output;
    // Staleness with dynamic tables on a tier trains (its bits against the tables in memory:
    // Cli.StaleDynamicTablesOnATierTrainLikeTablesInMemory).
    t = with_tier(j, "cpu", "lru", dir_);
    t["embedding"]["staleness"] = 1;
    r = train_run(t, "stale", "", 2);
    EXPECT_EQ(r.code, 0) << r.output;
}

}  // namespace
}  // namespace zt::testing
