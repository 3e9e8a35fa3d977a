// Tiered embedding tables from the command line (docs/embedding-tier.md): sharded tables whose rows
// live on host memory or in swap files behind a cache of a few percent of their rows train bit
// for bit like tables in memory (every step misses, evicts and writes back); a run killed in the
// middle of a write-back resumes from its checkpoint to the same weights; checkpoints (full and
// incremental) and exports take a tiered shard in pieces (Note [Tiered shards in pieces]) and
// resume and export on another rank count; a cache too small for a step, and a tier with nothing
// to hold, are refused with the reason.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cli_fixture.h"
#include "dlrm_cli_util.h"
#include "util/error.h"

namespace zt::testing {
namespace {

nlohmann::json tier_config() {
    nlohmann::json j = small_sharded_dlrm(6);
    j["data"]["eval_records"] = 64;
    j["eval_interval"] = 3;
    j["eval_iters"] = 1;
    j["checkpoint"] = {{"interval_steps", 2}};
    return j;
}

// The embedding entries of metrics.jsonl's training lines that report a tier.
std::vector<nlohmann::json> tier_lines(const fs::path& run) {
    std::vector<nlohmann::json> out;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
        const nlohmann::json j = nlohmann::json::parse(line);
        if (j.contains("embedding") && j["embedding"].contains("tier"))
            out.push_back(j["embedding"]);
    }
    return out;
}

TEST_F(Cli, TieredTablesTrainBitForBitLikeTablesInMemory) {
    nlohmann::json j = tier_config();
    const CommandResult mem =
        run_zerotrain(zt::str_cat("train ", write_config(j, "mem.json"),
                                  " --ranks 2 --quiet --run-dir ", (dir_ / "mem").string()));
    ASSERT_EQ(mem.code, 0) << mem.output;
    const std::string want = slurp(dir_ / "mem/model.safetensors");
    ASSERT_FALSE(want.empty());
    // 5% of a shard's rows: about 100 rows of the 2000-row shards, for up to 128 ids a step.
    for (const char* device : {"cpu", "nvme"}) {
        for (const char* policy : {"lru", "lfu"}) {
            SCOPED_TRACE(zt::str_cat(device, " ", policy));
            j["embedding"]["tier"] = {
                {"device", device}, {"cache_ratio", 0.05}, {"policy", policy}};
            if (std::string(device) == "nvme") j["embedding"]["tier"]["nvme_path"] = dir_.string();
            const fs::path run = dir_ / zt::str_cat(device, "-", policy);
            const CommandResult r = run_zerotrain(zt::str_cat(
                "train ", write_config(j, "tier.json"), " --ranks 2 --run-dir ", run.string()));
            ASSERT_EQ(r.code, 0) << r.output;
            EXPECT_NE(r.output.find("embedding.tier: this rank's"), std::string::npos) << r.output;
            EXPECT_TRUE(slurp(run / "model.safetensors") == want);
            const std::vector<nlohmann::json> t = tier_lines(run);
            ASSERT_EQ(t.size(), 6u);
            int64_t misses = 0, evictions = 0, writebacks = 0, read_ahead = 0;
            for (const nlohmann::json& e : t) {
                // Every id a rank asked an owner for is one fetched row, a hit or a miss (both
                // tables here are tiered and split by rows or whole).
                const nlohmann::json& x = e["tier"];
                EXPECT_EQ(x["hits"].get<int64_t>() + x["misses"].get<int64_t>(),
                          e["embedding_unique_ids"].get<int64_t>());
                misses += x["misses"].get<int64_t>();
                evictions += x["evictions"].get<int64_t>();
                writebacks += x["writebacks"].get<int64_t>();
                read_ahead += x["prefetch_hits"].get<int64_t>();
            }
            EXPECT_GT(misses, 0);
            EXPECT_GT(evictions, 0);
            EXPECT_GT(writebacks, 0);
            EXPECT_GT(read_ahead, 0);  // the next micro-batch's rows were read ahead
            if (std::string(device) == "nvme") {
                EXPECT_GT(t.back()["tier"]["bytes_written"].get<int64_t>(), 0);
            }
        }
    }
    // The swap files went with their runs.
    for (const auto& e : fs::directory_iterator(dir_))
        EXPECT_EQ(e.path().filename().string().find("zerotrain-swap-"), std::string::npos)
            << e.path();
}

TEST_F(Cli, TieredRunKilledInAWriteBackResumesToTheSameWeights) {
    nlohmann::json j = tier_config();
    j["embedding"]["tier"] = {
        {"device", "nvme"}, {"nvme_path", dir_.string()}, {"cache_ratio", 0.05}};
    const std::string cfg = write_config(j);
    const CommandResult full = run_zerotrain(
        zt::str_cat("train ", cfg, " --ranks 2 --quiet --run-dir ", (dir_ / "full").string()));
    ASSERT_EQ(full.code, 0) << full.output;
    const fs::path run = dir_ / "killed";
    const CommandResult killed =
        run_command(zt::str_cat("ZT_FAULT=kill_in_writeback:step=5:rank=1 ", ZT_BINARY, " train ",
                                cfg, " --ranks 2 --quiet --run-dir ", run.string(), " 2>&1"));
    ASSERT_NE(killed.code, 0) << killed.output;
    EXPECT_NE(killed.output.find("while writing evicted embedding rows back in step 5"),
              std::string::npos)
        << killed.output;
    EXPECT_FALSE(fs::exists(run / "model.safetensors"));
    const CommandResult resumed =
        run_zerotrain(zt::str_cat("train ", cfg, " --ranks 2 --resume --run-dir ", run.string()));
    ASSERT_EQ(resumed.code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("at step 4"), std::string::npos) << resumed.output;
    EXPECT_TRUE(slurp(run / "model.safetensors") == slurp(dir_ / "full/model.safetensors"));
}

// The number of blocks a checkpoint's sparse file holds (entries of its header).
size_t sparse_file_blocks(const fs::path& file) {
    const std::string bytes = slurp(file);
    size_t n = 0;
    for (size_t at = bytes.find("\"tensor\""); at != std::string::npos;
         at = bytes.find("\"tensor\"", at + 1))
        ++n;
    return n;
}

TEST_F(Cli, TieredTablesCheckpointResumeAndExportInPieces) {
    nlohmann::json j = tier_config();  // 6 steps, a checkpoint every 2
    // 1 KiB pieces: 10 rows of 8 weights and Adam's 16 state values; every checkpoint of a
    // 2,000-row shard writes about 200 of them.
    j["embedding"]["tier"] = {
        {"device", "cpu"}, {"cache_ratio", 0.05}, {"checkpoint_piece_bytes", 1000}};
    j["checkpoint"]["incremental"] = {{"full_every", 3}};  // 2 full, 4 on 2, 6 on 2 and 4
    ASSERT_EQ(train_run(j, "full", "", 2).code, 0);
    const std::string want = slurp(dir_ / "full/model.safetensors");
    EXPECT_GT(sparse_file_blocks(dir_ / "full/checkpoints/step_00000002/sparse_rank_00000.bin"),
              200u);
    EXPECT_EQ(chain_names(dir_ / "full/checkpoints/step_00000004"),
              (std::vector<std::string>{"step_00000002"}));
    EXPECT_GT(sparse_file_blocks(dir_ / "full/checkpoints/step_00000004/sparse_rank_00000.bin"),
              200u);  // a delta per piece
    // Resumed from the increment at step 4: the same bytes.
    nlohmann::json part = j;
    part["steps"] = 5;
    ASSERT_EQ(train_run(part, "part", "", 2).code, 0);
    fs::remove_all(dir_ / "part/checkpoints/step_00000005");
    const CommandResult r = train_run(j, "part", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("at step 4"), std::string::npos) << r.output;
    EXPECT_TRUE(slurp(dir_ / "part/model.safetensors") == want);
    // Asynchronous checkpoints write the pieces before the step loop goes on: the same resume.
    nlohmann::json async = part;
    async["checkpoint"]["async"] = true;
    ASSERT_EQ(train_run(async, "async", "", 2).code, 0);
    fs::remove_all(dir_ / "async/checkpoints/step_00000005");
    async["steps"] = 6;
    ASSERT_EQ(train_run(async, "async", "--resume", 2).code, 0);
    EXPECT_TRUE(slurp(dir_ / "async/model.safetensors") == want);
    EXPECT_EQ(chain_names(dir_ / "part/checkpoints/step_00000006"),
              (std::vector<std::string>{"step_00000002", "step_00000004"}));
    // One process reads the two ranks' pieces (two increments on a full checkpoint) and exports
    // them through its own tier, in pieces too: the run's own weights.
    const std::string cfg = write_config(j, "tier.json");
    const CommandResult e =
        run_zerotrain(zt::str_cat("export ", cfg, " --from ", (dir_ / "part").string(), " --out ",
                                  (dir_ / "x.safetensors").string()));
    ASSERT_EQ(e.code, 0) << e.output;
    EXPECT_EQ(read_tensors(dir_ / "x.safetensors"), read_tensors(dir_ / "full/model.safetensors"));
    EXPECT_FALSE(fs::exists(dir_ / "x.safetensors.scratch"));  // unlinked once mapped
    EXPECT_FALSE(fs::exists(dir_ / "full/model.safetensors.scratch"));
}

TEST_F(Cli, TierRefusalsSayWhy) {
    nlohmann::json j = tier_config();
    j["embedding"]["tier"] = {{"device", "cpu"}, {"cache_ratio", 0.005}};  // 10 rows a shard
    CommandResult r =
        run_zerotrain(zt::str_cat("train ", write_config(j, "small.json"),
                                  " --ranks 2 --quiet --run-dir ", (dir_ / "a").string()));
    EXPECT_NE(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("raise embedding.tier.cache_ratio"), std::string::npos) << r.output;
    j["embedding"]["tier"] = {{"device", "nvme"}, {"cache_ratio", 0.1}};
    r = run_zerotrain(zt::str_cat("train ", write_config(j, "nopath.json"), " --quiet --run-dir ",
                                  (dir_ / "b").string()));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("embedding.tier.nvme_path"), std::string::npos) << r.output;
    j["embedding"]["tier"] = {{"device", "cpu"}, {"cache_ratio", 0.1}, {"queue_depth", 8}};
    r = run_zerotrain(zt::str_cat("train ", write_config(j, "depth.json"), " --quiet --run-dir ",
                                  (dir_ / "b2").string()));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("embedding.tier.queue_depth"), std::string::npos) << r.output;
    j["embedding"]["tier"] = {{"device", "cpu"}, {"cache_ratio", 0.1}, {"cache_bytes", 4096}};
    r = run_zerotrain(zt::str_cat("train ", write_config(j, "both.json"), " --quiet --run-dir ",
                                  (dir_ / "c").string()));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("exactly one of cache_ratio"), std::string::npos) << r.output;
    j["embedding"]["tier"] = {{"device", "cpu"}, {"cache_ratio", 0.1}};
    j["embedding"]["sharding"] = "data_parallel";
    r = run_zerotrain(zt::str_cat("train ", write_config(j, "none.json"), " --quiet --run-dir ",
                                  (dir_ / "d").string()));
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("nothing would be tiered"), std::string::npos) << r.output;
    // cache_bytes: the budget counts the cache, not the tables.
    j["embedding"]["sharding"] = "row";
    j["model"]["table_rows"] = {400000, 2500, 40};
    j["memory"] = {{"budget_per_rank", "8MiB"}};
    j["steps"] = 2;
    j["embedding"]["tier"] = {{"device", "cpu"}, {"cache_bytes", 1 << 20}};
    r = run_zerotrain(zt::str_cat("train ", write_config(j, "bytes.json"), " --ranks 2 --run-dir ",
                                  (dir_ / "e").string()));
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("in memory, the rest tiered"), std::string::npos) << r.output;
    j["embedding"].erase("tier");
    r = run_zerotrain(zt::str_cat("train ", write_config(j, "untiered.json"),
                                  " --ranks 2 --quiet --run-dir ", (dir_ / "f").string()));
    EXPECT_EQ(r.code, 2) << r.output;
}

}  // namespace
}  // namespace zt::testing
