// Incremental checkpoints of sharded static tables (checkpoint.incremental.full_every, Note
// [Sharded table increments]): a 2-rank run with row- and table-wise tables resumed from a chain
// continues bit for bit (model.safetensors byte for byte), in memory and tiered (embedding.tier
// on host memory with a 5% cache), and beside a dynamic table; a 2-rank chain resumed on one
// process, and on 2 ranks under another sharding plan, gives what the 2-rank full checkpoint gives
// and starts a chain of its own; an increment is much smaller than a full checkpoint when few rows
// change.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "checkpoint/manifest.h"
#include "cli_fixture.h"
#include "dlrm_cli_util.h"
#include "runtime/checkpoint_chain.h"

namespace zt::testing {
namespace {

nlohmann::json sharded_config() {
    nlohmann::json j = small_sharded_dlrm(8);
    j["checkpoint"] = {{"interval_steps", 2}, {"incremental", {{"full_every", 3}}}};
    return j;
}

TEST_F(Cli, ShardedIncrementalChainResumesBitForBit) {
    const nlohmann::json j = sharded_config();  // checkpoints 2 F, 4 I, 6 I, 8 F
    ASSERT_EQ(train_run(j, "full", "", 2).code, 0);
    const std::string want = slurp(dir_ / "full/model.safetensors");
    ASSERT_FALSE(want.empty());
    const RunLog a = read_run("full");
    ASSERT_EQ(a.loss.size(), 8u);
    nlohmann::json part = j;
    part["steps"] = 6;
    for (const char* tier : {"", "cpu"}) {
        SCOPED_TRACE(tier);
        nlohmann::json p = part;
        const std::string run = *tier ? "tier" : "part";
        if (*tier) p["embedding"]["tier"] = {{"device", tier}, {"cache_ratio", 0.05}};
        ASSERT_EQ(train_run(p, run, "", 2).code, 0);
        const fs::path ck = dir_ / run / "checkpoints";
        EXPECT_TRUE(chain_names(ck / "step_00000002").empty());
        EXPECT_EQ(chain_names(ck / "step_00000006"),
                  (std::vector<std::string>{"step_00000002", "step_00000004"}));
        const Manifest m = read_manifest((ck / "step_00000006").string());
        EXPECT_EQ(m.trainer["sparse"]["delta"]["tensors"],
                  (nlohmann::json{"emb_l.0.weight", "emb_l.1.weight"}));
        p["steps"] = 8;
        const CommandResult r = train_run(p, run, "--resume", 2);
        ASSERT_EQ(r.code, 0) << r.output;
        EXPECT_TRUE(chain_names(ck / "step_00000008").empty());  // the 3rd of the chain: full
        EXPECT_EQ(read_run(run).loss, a.loss);
        EXPECT_TRUE(slurp(dir_ / run / "model.safetensors") == want);
    }
    // The metrics say what each checkpoint wrote: static bytes, no dynamic ones.
    std::map<int64_t, std::pair<std::string, int64_t>> wrote;
    for (const nlohmann::json& l : step_lines("full"))
        if (l.contains("checkpoint")) {
            EXPECT_EQ(l["checkpoint"]["dynamic_bytes"].get<int64_t>(), 0);
            wrote[l["checkpoint"]["step"]] = {l["checkpoint"]["kind"],
                                              l["checkpoint"]["static_bytes"]};
        }
    ASSERT_EQ(wrote.size(), 3u);
    EXPECT_EQ(wrote[2].first, "full");
    EXPECT_EQ(wrote[4].first, "incremental");
    EXPECT_EQ(wrote[6].first, "incremental");
    EXPECT_LT(wrote[4].second * 4, wrote[2].second);
}

TEST_F(Cli, ShardedIncrementalChainReshardsToOneRankAndAnotherPlan) {
    nlohmann::json j = sharded_config();
    j["steps"] = 6;
    j["checkpoint"]["incremental"]["full_every"] = 4;  // 2 F, 4 I, 6 I
    ASSERT_EQ(train_run(j, "chain", "", 2).code, 0);
    EXPECT_EQ(chain_names(dir_ / "chain/checkpoints/step_00000006"),
              (std::vector<std::string>{"step_00000002", "step_00000004"}));
    nlohmann::json plain = j;
    plain["checkpoint"].erase("incremental");
    ASSERT_EQ(train_run(plain, "plain", "", 2).code, 0);
    // 2 ranks -> 1, and 2 ranks under another plan (the row- and table-wise tables swapped):
    // the chain's state is the full checkpoint's, so both continue with the same bits.
    nlohmann::json one = j;
    one["steps"] = 8;
    one["gradient_accumulation_steps"] = 4;  // the same global batch
    nlohmann::json swapped = j;
    swapped["steps"] = 8;
    swapped["embedding"]["sharding"] = {"table", "row", "data_parallel"};
    for (const auto& [name, cfg, ranks] :
         {std::tuple{"one", one, 1}, std::tuple{"swapped", swapped, 2}}) {
        SCOPED_TRACE(name);
        const std::string from_chain = str_cat(name, "-chain"), from_full = str_cat(name, "-full");
        copy_checkpoints(dir_ / "chain", dir_ / from_chain,
                         {"step_00000002", "step_00000004", "step_00000006"});
        copy_checkpoints(dir_ / "plain", dir_ / from_full, {"step_00000006"});
        CommandResult r = train_run(cfg, from_chain, "--resume", ranks);
        ASSERT_EQ(r.code, 0) << r.output;
        r = train_run(cfg, from_full, "--resume", ranks);
        ASSERT_EQ(r.code, 0) << r.output;
        const RunLog a = read_run(from_chain), b = read_run(from_full);
        ASSERT_EQ(a.loss.size(), 8u);  // steps 7 and 8: the copies had no metrics
        EXPECT_EQ(std::vector<double>(a.loss.begin() + 6, a.loss.end()),
                  std::vector<double>(b.loss.begin() + 6, b.loss.end()));
        const std::string w = slurp(dir_ / from_chain / "model.safetensors");
        EXPECT_FALSE(w.empty());
        EXPECT_TRUE(w == slurp(dir_ / from_full / "model.safetensors"));
        // Another rank count or plan starts a chain of its own: step 8 is full.
        EXPECT_TRUE(chain_names(dir_ / from_chain / "checkpoints/step_00000008").empty());
    }
}

TEST_F(Cli, ShardedAndDynamicTablesChainResumesBitForBit) {
    nlohmann::json j = sharded_config();
    j["model"].erase("table_rows");
    j["model"].erase("embedding_dim");
    j["model"]["tables"] = {{{"rows", 4001}, {"dim", 8}},
                            {{"dynamic", true}, {"dim", 8}, {"id_range", 3000}}};
    j["embedding"] = {{"sharding", {"row", "auto"}},
                      {"optimizer", {{"type", "adagrad"}, {"lr", 0.05}}}};
    ASSERT_EQ(train_run(j, "full", "").code, 0);
    nlohmann::json part = j;
    part["steps"] = 6;
    ASSERT_EQ(train_run(part, "part", "").code, 0);
    const Manifest m = read_manifest((dir_ / "part/checkpoints/step_00000006").string());
    EXPECT_EQ(m.trainer["sparse"]["delta"]["tensors"],
              (nlohmann::json{"emb_l.0.weight", "emb_l.1.weight"}));
    EXPECT_GT(m.trainer["sparse"]["incremental_bytes"]["static"].get<int64_t>(), 0);
    EXPECT_GT(m.trainer["sparse"]["incremental_bytes"]["dynamic"].get<int64_t>(), 0);
    const CommandResult r = train_run(j, "part", "--resume");
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(read_run("part").loss, read_run("full").loss);
    EXPECT_TRUE(slurp(dir_ / "part/model.safetensors") == slurp(dir_ / "full/model.safetensors"));
    EXPECT_TRUE(slurp(dir_ / "part/model.dynamic.safetensors") ==
                slurp(dir_ / "full/model.dynamic.safetensors"));
}

TEST_F(Cli, ShardedIncrementIsSmallerWhenFewRowsChange) {
    // 20,000 + 3,000 rows; a step looks up at most 8 ids per table.
    nlohmann::json j = sharded_config();
    j["steps"] = 10;
    j["gradient_accumulation_steps"] = 1;
    j["train_micro_batch_size_per_gpu"] = 8;
    j["model"]["table_rows"] = {20000, 3000, 40};
    j["checkpoint"] = {{"interval_steps", 1}, {"incremental", {{"full_every", 8}}}};
    ASSERT_EQ(train_run(j, "run", "").code, 0);
    std::map<int64_t, std::pair<std::string, int64_t>> wrote;
    for (const nlohmann::json& l : step_lines("run"))
        if (l.contains("checkpoint"))
            wrote[l["checkpoint"]["step"]] = {l["checkpoint"]["kind"],
                                              l["checkpoint"]["static_bytes"]};
    ASSERT_EQ(wrote.size(), 9u);  // steps 1 (full), 2 to 8, 9 (full); 10 has no line after it
    EXPECT_EQ(wrote[9].first, "full");
    const int64_t full = wrote[9].second;
    // Every row with Adam's two planes: (20000 + 3000) x (8 + 16) x 4 bytes.
    EXPECT_EQ(full, 23000 * 24 * 4);
    const auto m = read_manifest((dir_ / "run/checkpoints/step_00000009").string());
    EXPECT_EQ(m.trainer["sparse"]["incremental_bytes"]["static"].get<int64_t>(), full);
    int64_t most = 0;
    for (int64_t s = 2; s <= 8; ++s) {
        EXPECT_EQ(wrote[s].first, "incremental") << s;
        most = std::max(most, wrote[s].second);
    }
    // At most 8 rows per table: (8 + 16) x 4 bytes each and its 8-byte index, and a tag a block.
    EXPECT_LE(most, 2 * (8 * (24 * 4 + 8) + 8));
    std::printf("sharded table bytes: full %lld at step 9, increments at most %lld\n",
                static_cast<long long>(full), static_cast<long long>(most));
    EXPECT_LT(fs::file_size(dir_ / "run/checkpoints/step_00000008/sparse_rank_00000.bin") * 50,
              fs::file_size(dir_ / "run/checkpoints/step_00000009/sparse_rank_00000.bin"));
    const CommandResult in = run_zerotrain(
        str_cat("checkpoint inspect ", (dir_ / "run/checkpoints/step_00000002").string()));
    EXPECT_EQ(in.code, 0) << in.output;
    EXPECT_NE(in.output.find("incremental: embedding tables hold what changed since "
                             "step_00000001 (each needed to resume it)"),
              std::string::npos)
        << in.output;
}

}  // namespace
}  // namespace zt::testing
