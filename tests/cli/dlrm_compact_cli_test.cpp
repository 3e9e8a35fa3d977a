// export --compact of a DLRM pruned by rows, as a user runs it (docs/pruning.md, "Compact
// export"): the compact model has each table's pruned rows removed and an id map beside its
// weights; on the same held-out data it scores the masked model's loss and AUC (sum and mean
// pooling, bags of several ids, some of whose ids were pruned), its config trains at the smaller
// size, on one process and on 2 ranks alike, and what cannot be compacted is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "checkpoint/safetensors.h"
#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

const std::vector<int64_t> kRows = {301, 70, 13};
constexpr int64_t kDim = 8;
constexpr double kSparsity = 0.5;

class DlrmCompactCli : public Cli {
  protected:
    // 32 samples a step; bags of 3 ids (hotness), rows pruning of half of each table's rows.
    static nlohmann::json config(int steps, const std::string& pooling) {
        return {{"train_batch_size", 32},
                {"train_micro_batch_size_per_gpu", 32},
                {"steps", steps},
                {"steps_per_print", 1},
                {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-2}}}}},
                {"model",
                 {{"type", "dlrm"},
                  {"table_rows", kRows},
                  {"embedding_dim", kDim},
                  {"pooling", pooling},
                  {"bottom_mlp", {16, kDim}},
                  {"top_mlp", {16}}}},
                {"data",
                 {{"type", "synthetic"}, {"records", 2000}, {"eval_records", 256}, {"hotness", 3}}},
                {"compression",
                 {{"pruning",
                   {{"type", "rows"},
                    {"final_sparsity", kSparsity},
                    {"start_step", 2},
                    {"end_step", 4},
                    {"frequency", 2}}}}},
                {"eval_interval", 0},
                {"threads", 1}};
    }
    // Trains `pooling`'s config 30 steps in run "run" and compacts it to dir_/small.*.
    nlohmann::json train_and_compact(const std::string& pooling, CommandResult& e) {
        EXPECT_EQ(train_run(config(30, pooling), "run", "").code, 0);
        const std::string cfg = write_config(config(30, pooling), "run_cfg.json");
        e = zt::testing::run_zerotrain("export " + cfg + " --from " + (dir_ / "run").string() +
                                       " --compact --out " + (dir_ / "small.safetensors").string());
        nlohmann::json small;
        if (e.code == 0) std::ifstream(dir_ / "small.config.json") >> small;
        return small;
    }
    // One step at lr 0 (the weights stay), then the evaluation of 256 held-out samples.
    static void evaluate_only(nlohmann::json& j) {
        j["steps"] = 1;
        j["optimizer"]["params"]["lr"] = 0.0;
        j["eval_interval"] = 1;
        j["eval_iters"] = 8;
    }
    nlohmann::json eval_line(const std::string& run) {
        std::ifstream f(dir_ / run / "metrics.jsonl");
        std::string line;
        while (std::getline(f, line)) {
            nlohmann::json j = nlohmann::json::parse(line);
            if (j.contains("eval_loss")) return j;
        }
        return {};
    }
    int64_t estimated_params(const nlohmann::json& j, const std::string& name) {
        const CommandResult r =
            zt::testing::run_zerotrain("estimate " + write_config(j, name) + " --json");
        EXPECT_EQ(r.code, 0) << r.output;
        const size_t at = r.output.find('{');
        if (at == std::string::npos) return -1;
        return nlohmann::json::parse(r.output.substr(at))["param_count"].get<int64_t>();
    }
};

int64_t pruned_rows(int64_t rows) { return static_cast<int64_t>(std::floor(kSparsity * rows)); }

}  // namespace

TEST_F(DlrmCompactCli, CompactModelScoresTheMaskedModelsLossAndAuc) {
    for (const std::string pooling : {"sum", "mean"}) {
        SCOPED_TRACE(pooling);
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        CommandResult e;
        nlohmann::json small = train_and_compact(pooling, e);
        ASSERT_EQ(e.code, 0) << e.output;
        // The written config: each table's kept rows, the raw ids' range, the id maps' file.
        const std::string maps = fs::absolute(dir_ / "small.id_map.safetensors").string();
        ASSERT_EQ(small["model"]["tables"].size(), kRows.size()) << small.dump();
        EXPECT_FALSE(small["model"].contains("table_rows"));
        EXPECT_FALSE(small.contains("compression"));
        int64_t removed = 0;
        zt::SafetensorsFile w((dir_ / "small.safetensors").string());
        zt::SafetensorsFile m(maps);
        for (size_t k = 0; k < kRows.size(); ++k) {
            const nlohmann::json& t = small["model"]["tables"][k];
            const int64_t kept = kRows[k] - pruned_rows(kRows[k]);
            removed += pruned_rows(kRows[k]);
            EXPECT_EQ(t["rows"], kept) << t.dump();
            EXPECT_EQ(t["id_range"], kRows[k]) << t.dump();
            EXPECT_EQ(t["id_map"], maps) << t.dump();
            EXPECT_EQ(t["pooling"], pooling) << t.dump();
            const std::string k_s = std::to_string(k);
            EXPECT_EQ(w.tensor("emb_l." + k_s + ".weight").shape,
                      (std::vector<int64_t>{kept, kDim}));
            // The map: -1 for each pruned row, the kept rows in order.
            const zt::SafetensorsTensor& mt = m.tensor("emb_l." + k_s + ".id_map");
            ASSERT_EQ(mt.dtype, "I32");
            ASSERT_EQ(mt.shape, (std::vector<int64_t>{kRows[k]}));
            std::vector<int32_t> map(static_cast<size_t>(kRows[k]));
            std::memcpy(map.data(), m.data(mt.name).data(), map.size() * 4);
            int32_t next = 0;
            int64_t minus = 0;
            for (int32_t v : map) {
                if (v < 0) {
                    ++minus;
                    continue;
                }
                EXPECT_EQ(v, next++);
            }
            EXPECT_EQ(minus, pruned_rows(kRows[k]));
        }
        // Parameter count after compaction: printed by export, and the estimate's.
        const int64_t before = estimated_params(config(6, pooling), "dense.json");
        const int64_t after = estimated_params(small, "small_est.json");
        EXPECT_EQ(after, before - removed * kDim);
        EXPECT_NE(
            e.output.find(std::to_string(before) + " -> " + std::to_string(after) + " parameters"),
            std::string::npos)
            << e.output;
        std::printf("%s: %lld -> %lld parameters\n", pooling.c_str(),
                    static_cast<long long>(before), static_cast<long long>(after));

        // The masked weights in the dense config and the compact model in its config, on the
        // same held-out samples: the same loss and AUC within fp32 rounding (mean pooling
        // rounds once per id instead of once per bag, Note [Removed rows in a bag]).
        nlohmann::json masked = config(1, pooling);
        masked.erase("compression");
        masked["init_from"] = (dir_ / "run" / "model.safetensors").string();
        evaluate_only(masked);
        evaluate_only(small);
        ASSERT_EQ(train_run(masked, "masked", "").code, 0);
        const CommandResult c = train_run(small, "compact", "");
        ASSERT_EQ(c.code, 0) << c.output;
        const nlohmann::json a = eval_line("masked"), b = eval_line("compact");
        ASSERT_TRUE(a.contains("eval_auc") && b.contains("eval_auc")) << a << b;
        const double la = a["eval_loss"], lb = b["eval_loss"];
        const double ua = a["eval_auc"], ub = b["eval_auc"];
        EXPECT_NEAR(lb, la, 1e-5 * la);
        EXPECT_NEAR(ub, ua, 1e-5 * ua);
        EXPECT_NEAR(read_run("compact").loss.at(0), read_run("masked").loss.at(0),
                    1e-5 * read_run("masked").loss.at(0));
        std::printf("%s: eval loss masked %.8f compact %.8f, AUC %.8f %.8f\n", pooling.c_str(), la,
                    lb, ua, ub);
    }
}

TEST_F(DlrmCompactCli, CompactConfigTrainsOnTheOriginalData) {
    CommandResult e;
    nlohmann::json small = train_and_compact("mean", e);
    ASSERT_EQ(e.code, 0) << e.output;
    small["steps"] = 12;
    const CommandResult r = train_run(small, "small_run", "");
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog log = read_run("small_run");
    ASSERT_EQ(log.loss.size(), 12u);
    for (double l : log.loss) EXPECT_TRUE(std::isfinite(l)) << l;
    double first = 0, last = 0;
    for (int i = 0; i < 4; ++i) {
        first += log.loss[static_cast<size_t>(i)];
        last += log.loss[log.loss.size() - 1 - static_cast<size_t>(i)];
    }
    EXPECT_LT(last, first);
    // Its final weights keep the smaller tables.
    zt::SafetensorsFile w((dir_ / "small_run" / "model.safetensors").string());
    EXPECT_EQ(w.tensor("emb_l.0.weight").shape[0], kRows[0] - pruned_rows(kRows[0]));
    // On 2 ranks at ZeRO stage 1 (each rank maps its own samples' ids): like one process, within
    // the equivalence rule's tolerance.
    small["train_micro_batch_size_per_gpu"] = 16;
    small["zero_optimization"] = {{"stage", 1}};
    const CommandResult r2 = train_run(small, "small_dp2", "", 2);
    ASSERT_EQ(r2.code, 0) << r2.output;
    expect_close(read_run("small_dp2"), log, "compact model, dp 2 ZeRO-1 against one process");
}

TEST_F(DlrmCompactCli, WhatCannotBeCompactedIsRefused) {
    // A run without rows pruning: no zero rows, nothing to remove.
    nlohmann::json dense = config(2, "sum");
    dense.erase("compression");
    ASSERT_EQ(train_run(dense, "dense", "").code, 0);
    const std::string out = " --compact --out " + (dir_ / "x.safetensors").string();
    CommandResult r = zt::testing::run_zerotrain("export " + write_config(dense, "d.json") +
                                                 " --from " + (dir_ / "dense").string() + out);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("nothing to remove"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));
    // Sharded tables (the embedding section).
    nlohmann::json sharded = dense;
    sharded["embedding"] = {{"sharding", "table"}};
    r = zt::testing::run_zerotrain("export " + write_config(sharded, "s.json") + out);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("placed by the \"embedding\" section"), std::string::npos) << r.output;

    // A compact model: compacting it again, pruning it by rows, an embedding section, and a
    // table key out of place are refused.
    CommandResult e;
    nlohmann::json small = train_and_compact("sum", e);
    ASSERT_EQ(e.code, 0) << e.output;
    r = zt::testing::run_zerotrain("export " + write_config(small, "sm.json") + out);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("is compacted already"), std::string::npos) << r.output;
    struct Case {
        nlohmann::json change;
        const char* says;
    };
    nlohmann::json no_range = small["model"], short_range = small["model"],
                   unmapped = small["model"];
    no_range["tables"][0].erase("id_range");
    short_range["tables"][0]["id_range"] = 300;
    unmapped["tables"][0].erase("id_map");
    const std::vector<Case> cases = {
        {{{"compression", config(2, "sum")["compression"]}}, "is a compacted table"},
        {{{"embedding", {{"sharding", "table"}}}}, "does not take it"},
        {{{"model", no_range}}, "a compacted table needs id_range"},
        {{{"model", unmapped}}, "goes with \"dynamic\": true"},
        {{{"model", short_range}}, "expected I32 or I64 [300]"},
    };
    for (const Case& c : cases) {
        nlohmann::json j = small;
        for (auto& [k, v] : c.change.items()) j[k] = v;
        const CommandResult t = train_run(j, "bad", "");
        EXPECT_EQ(t.code, 2) << c.change.dump() << t.output;
        EXPECT_NE(t.output.find(c.says), std::string::npos) << c.change.dump() << t.output;
        EXPECT_FALSE(fs::exists(dir_ / "bad" / "model.safetensors"));
    }
}
