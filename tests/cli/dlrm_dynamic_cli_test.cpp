// Dynamic embedding tables from the command line (docs/embedding-dynamic.md): a dynamic table that
// admits every id and evicts nothing trains exactly like a static sharded table over the same ids
// (same losses, dense weights and rows, bit for bit); a run with admission, LFU eviction and a
// default row resumed from its checkpoint continues bit for bit (rows, ids, optimizer state and
// counters), on one rank and on two; two ranks train like one process with the same global batch;
// the metrics' table figures hold together; wrong keys exit 2 naming them.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "checkpoint/safetensors.h"
#include "cli_fixture.h"
#include "dlrm_cli_util.h"
#include "util/error.h"

namespace zt::testing {
namespace {

nlohmann::json dynamic_config() {
    return {
        {"train_micro_batch_size_per_gpu", 32},
        {"gradient_accumulation_steps", 2},
        {"steps", 6},
        {"steps_per_print", 1},
        {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
        {"model",
         {{"type", "dlrm"},
          {"tables",
           {{{"rows", 3001}, {"dim", 8}},
            {{"dynamic", true}, {"id_range", 700}, {"dim", 8}},
            {{"rows", 40}, {"dim", 8}, {"pooling", "mean"}}}},
          {"bottom_mlp", {16, 8}},
          {"top_mlp", {16}}}},
        {"embedding", {{"sharding", "row"}, {"optimizer", {{"type", "adagrad"}, {"lr", 0.05}}}}},
        {"data", {{"type", "synthetic"}, {"records", 2000}, {"eval_records", 0}, {"hotness", 2}}},
        {"threads", 1}};
}

TEST_F(Cli, DynamicTableWithEveryIdAdmittedTrainsLikeAStaticTable) {
    const nlohmann::json dyn = dynamic_config();
    nlohmann::json stat = dyn;
    stat["model"]["tables"][1] = {{"rows", 700}, {"dim", 8}};
    ASSERT_EQ(train_run(dyn, "dyn", "").code, 0);
    const CommandResult s = train_run(stat, "static", "");
    ASSERT_EQ(s.code, 0) << s.output;
    const RunLog a = read_run("dyn"), b = read_run("static");
    ASSERT_EQ(a.loss.size(), 6u);
    EXPECT_EQ(a.loss, b.loss);  // bit for bit
    auto wa = read_tensors(dir_ / "dyn/model.safetensors");
    auto wb = read_tensors(dir_ / "static/model.safetensors");
    for (const auto& [name, v] : wb) {
        if (name == "emb_l.1.weight") continue;
        EXPECT_EQ(wa[name], v) << name;
    }
    // The dynamic rows (ascending ids) are the static table's rows at those ids.
    const auto rows = read_tensors(dir_ / "dyn/model.dynamic.safetensors");
    const std::vector<double>& ids = rows.at("emb_l.1.ids");
    const std::vector<double>& w = rows.at("emb_l.1.weight");
    ASSERT_FALSE(ids.empty());
    ASSERT_EQ(w.size(), ids.size() * 8);
    ASSERT_EQ(wa["emb_l.1.weight"], w);
    EXPECT_TRUE(rows.at("emb_l.1.evicted").empty());
    const std::vector<double>& full = wb.at("emb_l.1.weight");
    for (size_t r = 0; r < ids.size(); ++r)
        for (size_t c = 0; c < 8; ++c)
            ASSERT_EQ(w[r * 8 + c], full[static_cast<size_t>(ids[r]) * 8 + c]) << ids[r];
}

TEST_F(Cli, DynamicTableResumesBitForBit) {
    nlohmann::json j = dynamic_config();
    j["steps"] = 12;
    j["model"]["tables"][1] = {
        {"dynamic", true},
        {"dim", 8},
        {"min_count", 2},
        {"evict", {{"unseen_steps", 4}, {"max_rows", 25}, {"policy", "lfu"}}},
        {"unadmitted", "default_row"}};
    j.erase("embedding");  // the dynamic table alone is sparse: sparse SGD at the dense rate
    j["checkpoint"] = {{"interval_steps", 4}};
    ASSERT_EQ(train_run(j, "full", "").code, 0);
    nlohmann::json part = j;
    part["steps"] = 8;
    ASSERT_EQ(train_run(part, "part", "").code, 0);
    const CommandResult r = train_run(j, "part", "--resume");
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog a = read_run("full"), b = read_run("part");
    ASSERT_EQ(a.loss.size(), 12u);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.weights, b.weights);
    EXPECT_EQ(read_tensors(dir_ / "full/model.dynamic.safetensors"),
              read_tensors(dir_ / "part/model.dynamic.safetensors"));
    // `export --from` reads the rows, ids and eviction log of the last checkpoint (step 12).
    const CommandResult e = run_zerotrain(str_cat("export ", (dir_ / "full.json").string(),
                                                  " --from ", (dir_ / "full").string(), " --out ",
                                                  (dir_ / "x.safetensors").string()));
    ASSERT_EQ(e.code, 0) << e.output;
    EXPECT_EQ(read_tensors(dir_ / "x.dynamic.safetensors"),
              read_tensors(dir_ / "full/model.dynamic.safetensors"));
    // The table's figures: rows within the cap, admissions less evictions is rows, and the
    // exported deletions are evicted ids that are not rows now.
    std::ifstream f(dir_ / "full/metrics.jsonl");
    std::string line;
    int64_t last_rows = -1, evictions = 0;
    while (std::getline(f, line)) {
        const auto m = nlohmann::json::parse(line);
        if (!m.contains("embedding")) continue;
        const auto& t = m["embedding"]["dynamic_tables"]["emb_l.1.weight"];
        EXPECT_LE(t["rows"].get<int64_t>(), 25);
        EXPECT_EQ(t["admissions"].get<int64_t>() - t["evictions"].get<int64_t>(),
                  t["rows"].get<int64_t>());
        EXPECT_GT(t["load_factor"].get<double>(), 0.0);
        last_rows = t["rows"];
        evictions = t["evictions"];
    }
    EXPECT_GT(evictions, 0);
    const auto rows = read_tensors(dir_ / "full/model.dynamic.safetensors");
    EXPECT_EQ(static_cast<int64_t>(rows.at("emb_l.1.ids").size()), last_rows);
    const std::vector<double>& gone = rows.at("emb_l.1.evicted");
    EXPECT_FALSE(gone.empty());
    for (double id : gone)
        EXPECT_FALSE(
            std::binary_search(rows.at("emb_l.1.ids").begin(), rows.at("emb_l.1.ids").end(), id));
    EXPECT_EQ(rows.at("emb_l.1.default").size(), 8u);
}

TEST_F(Cli, DynamicTableConfigErrorsExit2) {
    struct Case {
        std::string what;
        nlohmann::json table;
        std::string expect;
    };
    const std::vector<Case> cases = {
        {"rows", {{"dynamic", true}, {"rows", 10}, {"dim", 8}}, "has no fixed rows"},
        {"min_count on a static table",
         {{"rows", 10}, {"dim", 8}, {"min_count", 2}},
         "goes with \"dynamic\": true"},
        {"policy",
         {{"dynamic", true}, {"dim", 8}, {"evict", {{"policy", "fifo"}}}},
         "model.tables[1].evict.policy"},
        {"unadmitted",
         {{"dynamic", true}, {"dim", 8}, {"unadmitted", "random"}},
         "model.tables[1].unadmitted"},
        {"min_count 0",
         {{"dynamic", true}, {"dim", 8}, {"min_count", 0}},
         "model.tables[1].min_count"},
        {"dim", {{"dynamic", true}}, "\"dim\""},
    };
    for (const Case& c : cases) {
        nlohmann::json j = dynamic_config();
        j["model"]["tables"][1] = c.table;
        const CommandResult r = train_run(j, "bad", "--overwrite");
        EXPECT_EQ(r.code, 2) << c.what << r.output;
        EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.what << r.output;
    }
    nlohmann::json j = dynamic_config();
    j["embedding"]["sharding"] = {"row", "row", "table"};
    CommandResult r = train_run(j, "bad", "--overwrite");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("embedding.sharding[1]: table 1 is dynamic"), std::string::npos)
        << r.output;
    j = dynamic_config();
    j["embedding"]["dtype"] = "bf16";
    j["embedding"]["optimizer"]["type"] = "sgd";
    r = train_run(j, "bad", "--overwrite");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("dynamic tables keep fp32 rows"), std::string::npos) << r.output;
}

// The per-step figures of a run's dynamic table, one line per step.
std::vector<nlohmann::json> table_metrics(const fs::path& metrics, const std::string& table) {
    std::vector<nlohmann::json> out;
    std::ifstream f(metrics);
    std::string line;
    while (std::getline(f, line)) {
        const auto m = nlohmann::json::parse(line);
        if (m.contains("embedding")) out.push_back(m["embedding"]["dynamic_tables"][table]);
    }
    return out;
}

TEST_F(Cli, DynamicTableShardedOverRanksTrainsLikeOneProcess) {
    // 2 ranks (threads) with accumulation 2 against one process with accumulation 4: the same
    // sightings, admissions and evictions in the same order (Note [Dynamic exchange]), rows within
    // the equivalence rule's fp32 tolerance (the dense part's reduction order differs).
    nlohmann::json j = dynamic_config();
    j["steps"] = 8;
    j["model"]["tables"][1] = {{"dynamic", true},
                               {"dim", 8},
                               {"min_count", 2},
                               {"evict", {{"unseen_steps", 3}}},
                               {"unadmitted", "default_row"}};
    j["embedding"]["optimizer"] = {{"type", "rowwise_adagrad"}, {"lr", 0.05}};
    j["checkpoint"] = {{"interval_steps", 4}};
    nlohmann::json one = j;
    one["gradient_accumulation_steps"] = 4;
    ASSERT_EQ(train_run(one, "one", "").code, 0);
    const CommandResult two = train_run(j, "two", "", 2);
    ASSERT_EQ(two.code, 0) << two.output;
    expect_close(read_run("two"), read_run("one"), "dynamic table, 2 ranks vs 1");
    const auto a = table_metrics(dir_ / "one/metrics.jsonl", "emb_l.1.weight");
    const auto b = table_metrics(dir_ / "two/metrics.jsonl", "emb_l.1.weight");
    ASSERT_EQ(a.size(), 8u);
    ASSERT_EQ(b.size(), 8u);
    for (size_t s = 0; s < a.size(); ++s)
        for (const char* k : {"rows", "pending", "admissions", "evictions"})
            EXPECT_EQ(a[s][k], b[s][k]) << k << " at step " << s + 1;
    EXPECT_GT(a.back()["evictions"].get<int64_t>(), 0);
    const auto ra = read_tensors(dir_ / "one/model.dynamic.safetensors");
    const auto rb = read_tensors(dir_ / "two/model.dynamic.safetensors");
    EXPECT_EQ(ra.at("emb_l.1.ids"), rb.at("emb_l.1.ids"));
    EXPECT_EQ(ra.at("emb_l.1.evicted"), rb.at("emb_l.1.evicted"));
    ASSERT_EQ(ra.at("emb_l.1.weight").size(), rb.at("emb_l.1.weight").size());
    for (size_t k = 0; k < ra.at("emb_l.1.weight").size(); ++k)
        EXPECT_NEAR(ra.at("emb_l.1.weight")[k], rb.at("emb_l.1.weight")[k], 1e-4) << k;

    // Resumed on 2 ranks from the checkpoint of step 4: bit for bit.
    nlohmann::json part = j;
    part["steps"] = 4;
    ASSERT_EQ(train_run(part, "part", "", 2).code, 0);
    CommandResult r = train_run(j, "part", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(read_run("part").loss, read_run("two").loss);
    EXPECT_EQ(read_tensors(dir_ / "part/model.dynamic.safetensors"), rb);
    // Resharded: the 2-rank checkpoint of step 4 resumed on one process trains on like the
    // one-process run (its state at step 4 is the same rows, state and counters).
    fs::create_directories(dir_ / "back/checkpoints");
    fs::copy(dir_ / "part/checkpoints/step_00000004", dir_ / "back/checkpoints/step_00000004",
             fs::copy_options::recursive);
    r = train_run(one, "back", "--resume");
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog back = read_run("back"), ref = read_run("one");
    for (size_t s = 4; s < 8; ++s) EXPECT_NEAR(back.loss[s], ref.loss[s], 1e-4 * ref.loss[s]) << s;
    const auto c = table_metrics(dir_ / "back/metrics.jsonl", "emb_l.1.weight");
    ASSERT_EQ(c.size(), 4u);  // steps 5 to 8: the copied run directory had no metrics
    for (size_t s = 4; s < 8; ++s)
        for (const char* k : {"rows", "pending", "admissions", "evictions"})
            EXPECT_EQ(c[s - 4][k], a[s][k]) << k << " at step " << s + 1;
    // `export --from` on one process gathers the 2-rank checkpoint of step 8: the run's own export.
    r = run_zerotrain(str_cat("export ", (dir_ / "two.json").string(), " --from ",
                              (dir_ / "two").string(), " --out ",
                              (dir_ / "x.safetensors").string()));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(read_tensors(dir_ / "x.dynamic.safetensors"), rb);
}

TEST_F(Cli, DynamicTablesOverMpiMatchThreadsByteForByte) {
    nlohmann::json j = dynamic_config();
    j["model"]["tables"][1] = {{"dynamic", true},
                               {"dim", 8},
                               {"min_count", 2},
                               {"evict", {{"unseen_steps", 2}, {"max_rows", 40}}},
                               {"unadmitted", "default_row"}};
    const std::string cfg = write_config(j);
    const CommandResult threads = run_zerotrain(
        str_cat("train ", cfg, " --quiet --ranks 2 --run-dir ", (dir_ / "threads").string()));
    ASSERT_EQ(threads.code, 0) << threads.output;
    const CommandResult mpi = run_command(str_cat(
        "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 "
        "OMP_WAIT_POLICY=passive timeout 120 mpirun --oversubscribe --mca btl self,vader -np 2 ",
        ZT_BINARY, " train ", cfg, " --quiet --run-dir ", (dir_ / "mpi").string()));
    ASSERT_EQ(mpi.code, 0) << mpi.output;
    for (const char* f : {"model.safetensors", "model.dynamic.safetensors"}) {
        const auto a = read_tensors(dir_ / "threads" / f);
        ASSERT_FALSE(a.empty());
        EXPECT_EQ(a, read_tensors(dir_ / "mpi" / f)) << f;
    }
}

}  // namespace
}  // namespace zt::testing
