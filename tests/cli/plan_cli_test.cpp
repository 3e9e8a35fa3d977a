// `zerotrain plan` and the plan check of every run (docs/planner.md): over a grid of layouts on
// the local backend, each step's predicted params, grads and optimizer bytes equal the measured
// ones exactly; `plan --check` summarizes a run; the planner's best layout and its reasons for
// rejecting the others; an infeasible budget names the least memory any layout needs.
#include <fstream>

#include "cli_fixture.h"
#include "planner/profile.h"
#include "tensor/gemm_machine.h"
#include "util/error.h"

namespace zt::testing {
namespace {

class PlanCli : public Cli {
  protected:
    static nlohmann::json config() {
        nlohmann::json j = tiny();
        j["model"]["n_layers"] = 2;
        j["steps"] = 2;
        j.erase("eval_interval");
        j.erase("eval_iters");
        j["data"].erase("eval_fraction");
        return j;
    }
    // Trains j on `ranks` ranks as run `name`; every step's measured peak within 3% under the
    // predicted one (the target for peaks; `floor` for an upper bound known to be
    // looser), never over it.
    void peak_within_prediction(const nlohmann::json& j, const std::string& name, int ranks,
                                double floor = 0.97) {
        const CommandResult r = train_run(j, name, "", ranks);
        ASSERT_EQ(r.code, 0) << r.output;
        const CommandResult c =
            run_zerotrain("plan --json --check " + (dir_ / name).string(), false);
        ASSERT_EQ(c.code, 0) << c.output;
        const nlohmann::json peak = nlohmann::json::parse(c.output)["peak_bytes"];
        EXPECT_LE(peak["max_ratio"].get<double>(), 1.0) << peak.dump();
        EXPECT_GE(peak["min_ratio"].get<double>(), floor) << peak.dump();
    }
    // A profile with round rates, so tests never calibrate (a real one takes seconds).
    std::string write_profile(const std::string& at = "", const std::string& identity = "test") {
        MachineProfile p;
        p.identity = identity;
        ThreadRates r;
        r.threads = 1;
        r.gemm_flops[0][0] = r.gemm_flops[1][0] = 1e9;
        r.gemm_flops[0][1] = r.gemm_flops[1][1] = 2e9;
        r.attention_flops = 5e8;
        r.elementwise_bytes_per_s = 5e9;
        p.rates.push_back(r);
        CommProfile c;
        c.backend = "local";
        c.all_reduce = c.reduce_scatter = c.all_gather = {2e-5, 2e9, {}};
        c.send_recv = {5e-6, 4e9, {}};
        p.comm.push_back(c);
        const std::string path = at.empty() ? (dir_ / "profile.json").string() : at;
        save_profile(p, path);
        return path;
    }
};

TEST_F(PlanCli, StateBytesArePredictedExactlyOverLayouts) {
    struct Layout {
        const char* name;
        int ranks;
        nlohmann::json sets;
    };
    const std::vector<Layout> grid = {
        {"one", 1, nlohmann::json::object()},
        {"dp2_z0", 2, {{"zero_optimization", {{"stage", 0}}}}},
        {"dp2_z1", 2, {{"zero_optimization", {{"stage", 1}}}}},
        {"dp2_z2", 2, {{"zero_optimization", {{"stage", 2}}}}},
        {"dp2_z3", 2, {{"zero_optimization", {{"stage", 3}}}}},
        {"tp2", 2, {{"parallel", {{"tensor", 2}}}}},
        {"pp2", 2, {{"parallel", {{"pipeline", {{"stages", 2}, {"micro_batches", 2}}}}}}},
        {"z3_offload_selective",
         2,
         {{"zero_optimization", {{"stage", 3}, {"offload_optimizer", {{"device", "cpu"}}}}},
          {"activation_checkpointing", {{"policy", "selective"}}}}},
        {"pp2_zero_bubble_offload",
         2,
         {{"parallel",
           {{"pipeline", {{"stages", 2}, {"schedule", "zero_bubble"}, {"micro_batches", 2}}}}},
          {"zero_optimization", {{"offload_optimizer", {{"device", "cpu"}}}}}}},
    };
    for (const Layout& l : grid) {
        SCOPED_TRACE(l.name);
        nlohmann::json j = config();
        j.merge_patch(l.sets);
        const CommandResult r = train_run(j, l.name, "", l.ranks);
        ASSERT_EQ(r.code, 0) << r.output;
        std::ifstream f(dir_ / l.name / "metrics.jsonl");
        std::string line;
        int checked = 0;
        while (std::getline(f, line)) {
            const nlohmann::json m = nlohmann::json::parse(line);
            if (!m.contains("plan")) continue;
            const nlohmann::json& s = m["plan"]["state_bytes"];
            for (const char* c : {"params", "grads", "optimizer"}) {
                ASSERT_TRUE(s.contains(c)) << m.dump();
                EXPECT_EQ(s[c]["predicted"], s[c]["measured"]) << c << ": " << m["plan"].dump();
            }
            EXPECT_GT(m["plan"]["peak_bytes"]["predicted"].get<double>(), 0);
            ++checked;
        }
        EXPECT_EQ(checked, 2);
    }
    const CommandResult c = run_zerotrain("plan --check " + (dir_ / "dp2_z2").string());
    ASSERT_EQ(c.code, 0) << c.output;
    EXPECT_NE(c.output.find("params: predicted"), std::string::npos) << c.output;
    EXPECT_NE(c.output.find("(exact)"), std::string::npos) << c.output;
    const CommandResult js = run_zerotrain("plan --json --check " + (dir_ / "pp2").string(), false);
    ASSERT_EQ(js.code, 0) << js.output;
    EXPECT_TRUE(nlohmann::json::parse(js.output)["state_exact"].get<bool>()) << js.output;
}

// A tensor-parallel rank's activations (gpt_activation_bytes with t and sp): the measured peak
// of each layout within 3% under the prediction (the target for peaks), never over it.
// Activations are most of this model's peak, so the one-process figure (what the planner took
// before) would be 15-35% over.
TEST_F(PlanCli, TensorParallelPeaksWithinTolerance) {
    nlohmann::json base = config();
    base["model"] = {{"type", "gpt"}, {"vocab_size", 256}, {"seq_len", 64},
                     {"d_model", 64}, {"n_layers", 2},     {"n_heads", 4}};
    base["train_micro_batch_size_per_gpu"] = 8;
    base["data"] = {{"type", "builtin"}, {"builtin_tokens", 65536}};
    const std::vector<std::pair<const char*, nlohmann::json>> grid = {
        {"tp2", {{"parallel", {{"tensor", 2}}}}},
        {"tp2_sp", {{"parallel", {{"tensor", 2}, {"sequence_parallel", true}}}}},
        {"tp2_every",
         {{"parallel", {{"tensor", 2}}}, {"activation_checkpointing", {{"policy", "every"}}}}},
        {"tp2_sp_selective",
         {{"parallel", {{"tensor", 2}, {"sequence_parallel", true}}},
          {"activation_checkpointing", {{"policy", "selective"}}}}},
    };
    for (const auto& [name, sets] : grid) {
        SCOPED_TRACE(name);
        nlohmann::json j = base;
        j.merge_patch(sets);
        peak_within_prediction(j, name, 2);
    }
}

// Note [Reduce buckets in the estimate]: at ZeRO stages 2 and 3, on one rank as on two, the
// gradient buckets the backward holds (one larger than reduce_bucket_size, for the 262k-element
// wte, lent from the tied head's backward on) are in the predicted peak: within 3% under it
// (before, 8-24% over it).
TEST_F(PlanCli, ReduceBucketsInThePeakAtEveryRankCount) {
    nlohmann::json base = config();
    base["model"] = {{"type", "gpt"}, {"vocab_size", 4096}, {"seq_len", 32},
                     {"d_model", 64}, {"n_layers", 2},      {"n_heads", 4}};
    base["train_micro_batch_size_per_gpu"] = 4;
    base["data"] = {{"type", "builtin"}, {"builtin_tokens", 65536}};
    base["zero_optimization"] = {{"reduce_bucket_size", 50000}};
    for (int stage : {2, 3})
        for (int ranks : {1, 2}) {
            const std::string name = zt::str_cat("z", stage, "_n", ranks);
            SCOPED_TRACE(name);
            nlohmann::json j = base;
            j["zero_optimization"]["stage"] = stage;
            peak_within_prediction(j, name, ranks);
        }
}

// Note [Gathered weights live at once]: at stage 3 the tied head holds the whole wte (262k
// elements) while the next blocks are prefetched (up to stage3_prefetch_bucket_size, here two
// blocks' worth); the predicted peak counts both (before: max(prefetch, wte) alone, and the
// run peaked over its prediction).
TEST_F(PlanCli, GatheredWeightsHeldAndPrefetchedInThePeak) {
    nlohmann::json j = config();
    j["model"] = {{"type", "gpt"}, {"vocab_size", 4096}, {"seq_len", 32},
                  {"d_model", 64}, {"n_layers", 4},      {"n_heads", 4}};
    j["train_micro_batch_size_per_gpu"] = 2;
    j["data"] = {{"type", "builtin"}, {"builtin_tokens", 65536}};
    j["zero_optimization"] = {{"stage", 3}, {"stage3_prefetch_bucket_size", 110000}};
    peak_within_prediction(j, "z3_prefetch", 2);
}

// A config that offloads its weights (offload_param, stage 3 only) plans on one rank: the
// offloaded stages 2 and 3 are layouts of their own there, ranked with the weights off the
// device; --host-memory too small for the cpu tier's host bytes rejects it and says so.
TEST_F(PlanCli, OneRankOffloadedWeightsPlanAndTheHostMemoryLimits) {
    nlohmann::json j = config();
    j["zero_optimization"] = {{"stage", 3},
                              {"offload_optimizer", {{"device", "cpu"}}},
                              {"offload_param", {{"device", "cpu"}}}};
    const std::string cfg = write_config(j, "offload.json");
    const std::string prof = write_profile();
    CommandResult r = run_zerotrain(
        zt::str_cat("plan ", cfg, " --ranks 1 --json --top 0 --profile ", prof), false);
    ASSERT_EQ(r.code, 0) << r.output;
    nlohmann::json out = nlohmann::json::parse(r.output);
    bool z3 = false;
    for (const auto& p : out["plans"]) {
        const auto& s = p["strategy"];
        if (s["zero_stage"] == 3 && s["offload"] == "cpu") {
            z3 = true;
            EXPECT_GT(p["host_bytes"].get<int64_t>(), 0);
        }
    }
    EXPECT_TRUE(z3) << r.output;
    r = run_zerotrain(
        zt::str_cat("plan ", cfg, " --ranks 1 --json --top 0 --host-memory 4KiB --profile ", prof),
        false);
    out = nlohmann::json::parse(r.output);
    bool said = false;
    for (const auto& x : out["rejected"])
        said = said || x["reason"].get<std::string>().find("(--host-memory)") != std::string::npos;
    EXPECT_TRUE(said) << r.output;
    for (const auto& p : out["plans"]) EXPECT_EQ(p["strategy"]["offload"], "none");
}

// --rank-speed (planner/hetero.h): a pipeline on a fast and a half-speed rank gets the larger
// stage on the fast one, in --set arguments the engine runs.
TEST_F(PlanCli, RankSpeedGivesUnequalStagesTheEngineRuns) {
    nlohmann::json j = config();
    j["model"]["n_layers"] = 4;
    const std::string cfg = write_config(j);
    const std::string prof = write_profile();
    const CommandResult r = run_zerotrain(
        "plan " + cfg + " --ranks 2 --rank-speed 1,0.5 --json --top 0 --profile " + prof, false);
    ASSERT_EQ(r.code, 0) << r.output;
    const nlohmann::json out = nlohmann::json::parse(r.output);
    const nlohmann::json* pipe = nullptr;
    for (const nlohmann::json& p : out["plans"])
        if (p["strategy"]["pp"] == 2 && !pipe) pipe = &p;
    ASSERT_NE(pipe, nullptr) << r.output;
    const std::vector<int64_t> counts = (*pipe)["strategy"]["partition"];
    ASSERT_EQ(counts.size(), 2u);
    EXPECT_EQ(counts[0] + counts[1], 4);
    EXPECT_GT(counts[0], counts[1]);  // the fast rank's stage is the larger
    std::string sets;
    for (const nlohmann::json& s : (*pipe)["config_sets"])
        sets += " --set '" + s.get<std::string>() + "'";
    EXPECT_NE(sets.find("partition"), std::string::npos) << sets;
    const CommandResult t = run_zerotrain("train " + cfg + " --quiet --ranks 2 --run-dir " +
                                          (dir_ / "uneven").string() + sets);
    ASSERT_EQ(t.code, 0) << t.output;
    // Without a pipeline, the fast rank takes the larger batch share (parallel.batch_shares);
    // the run of the layout's arguments stays within its predicted peak (the larger share's).
    const nlohmann::json* shared = nullptr;
    for (const nlohmann::json& p : out["plans"])
        if (p["strategy"].contains("batch_shares") && !shared) shared = &p;
    ASSERT_NE(shared, nullptr) << r.output;
    const std::vector<int64_t> shares = (*shared)["strategy"]["batch_shares"];
    ASSERT_EQ(shares.size(), 2u);
    EXPECT_GT(shares[0], shares[1]);
    sets.clear();
    for (const nlohmann::json& s : (*shared)["config_sets"])
        sets += " --set '" + s.get<std::string>() + "'";
    const CommandResult u = run_zerotrain("train " + cfg + " --quiet --ranks 2 --run-dir " +
                                          (dir_ / "shared").string() + sets);
    ASSERT_EQ(u.code, 0) << sets << ": " << u.output;
    const CommandResult c =
        run_zerotrain("plan --json --check " + (dir_ / "shared").string(), false);
    ASSERT_EQ(c.code, 0) << c.output;
    EXPECT_LE(nlohmann::json::parse(c.output)["peak_bytes"]["max_ratio"].get<double>(), 1.0)
        << c.output;
    EXPECT_NE(run_zerotrain("plan " + cfg + " --ranks 2 --rank-speed 1 --profile " + prof).code, 0);
    // "measured": the profile's speeds (from `mpirun -np 2 zerotrain bench calibrate`) plan the
    // same layouts as the declared ones; a profile without them is an input error.
    EXPECT_NE(
        run_zerotrain("plan " + cfg + " --ranks 2 --rank-speed measured --profile " + prof).code,
        0);
    std::optional<MachineProfile> with = load_profile(prof);
    ASSERT_TRUE(with);
    with->rank_speeds = {1.0, 0.5};
    save_profile(*with, prof);
    const CommandResult m = run_zerotrain(
        "plan " + cfg + " --ranks 2 --rank-speed measured --json --top 0 --profile " + prof, false);
    ASSERT_EQ(m.code, 0) << m.output;
    EXPECT_EQ(nlohmann::json::parse(m.output)["plans"], out["plans"]);
}

// Note [DLRM's backward transient] and Note [Compact rows of the exchanged tables]: a DLRM's
// predicted peak is within 3% over its run's with replicated tables, at an odd micro-batch and
// with unequal widths too (before: 5-9% over); with sharded tables, whose batches use fewer rows
// than the bound counts, never under it (before: 10% under).
TEST_F(PlanCli, DlrmPeakWithinItsPrediction) {
    nlohmann::json j = {{"train_micro_batch_size_per_gpu", 300},
                        {"steps", 2},
                        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 0.005}}}}},
                        {"model",
                         {{"type", "dlrm"},
                          {"table_rows", {2000, 1000, 500, 200, 50}},
                          {"embedding_dim", 16},
                          {"bottom_mlp", {64, 16}},
                          {"top_mlp", {96, 32}}}},
                        {"data", {{"type", "synthetic"}, {"records", 4000}}},
                        {"threads", 1}};
    peak_within_prediction(j, "dlrm_replicated", 1);
    j["train_micro_batch_size_per_gpu"] = 128;
    j["embedding"] = {{"sharding", "table"}};
    peak_within_prediction(j, "dlrm_sharded", 2, 0.0);  // the rows a batch uses: a bound
}

// Note [Tables by speed]: with sharded tables the fast rank gets more of them (no batch shares:
// the engine refuses those with sharded tables), and the layout's arguments train.
TEST_F(PlanCli, RankSpeedPlacesShardedTablesAndTheRunTakesThePlacement) {
    const nlohmann::json j = {
        {"train_micro_batch_size_per_gpu", 64},
        {"steps", 2},
        {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
        {"model",
         {{"type", "dlrm"},
          {"table_rows", {4000, 3000, 2000, 1000, 900, 800, 700, 600}},
          {"embedding_dim", 8},
          {"bottom_mlp", {16, 8}},
          {"top_mlp", {16}}}},
        {"embedding", {{"sharding", "table"}, {"optimizer", {{"type", "sgd"}, {"lr", 0.05}}}}},
        {"data", {{"type", "synthetic"}, {"records", 2000}}},
        {"threads", 1}};
    const std::string cfg = write_config(j);
    // A real profile (one thread, ~2 s), so that the plan times the tables' lookups here.
    const std::string prof = (dir_ / "calibrated.json").string();
    const CommandResult cal = run_zerotrain("bench calibrate --threads 1 --out " + prof, false);
    ASSERT_EQ(cal.code, 0) << cal.output;
    const CommandResult r = run_zerotrain(
        "plan " + cfg + " --ranks 2 --rank-speed 1,0.25 --json --top 0 --profile " + prof, false);
    ASSERT_EQ(r.code, 0) << r.output;
    const nlohmann::json out = nlohmann::json::parse(r.output);
    ASSERT_FALSE(out["plans"].empty()) << r.output;
    // Note [Kernel times at the host's speed now]: the calibration and the products timed for
    // this plan keep the reference beside them, and the plan read its times at the host's speed
    // now (or says that the host was busy: tests run side by side).
    const std::string said = out["profile"].get<std::string>();
    EXPECT_TRUE(said.find("kernel times at the host's speed now") != std::string::npos ||
                said.find("busy") != std::string::npos)
        << said;
    const nlohmann::json saved = nlohmann::json::parse(std::ifstream(prof));
    EXPECT_GT(saved["rates"][0]["speed_ref_s"].get<double>(), 0);
    if (said.find("not kept") == std::string::npos) {
        EXPECT_FALSE(saved["shape_ref_s"].empty());
    }
    for (const nlohmann::json& p : out["plans"])
        EXPECT_FALSE(p["strategy"].contains("batch_shares")) << p.dump();
    const nlohmann::json& best = out["plans"][0];
    ASSERT_EQ(best["strategy"]["dp"], 2) << best.dump();
    EXPECT_EQ(best["strategy"]["table_weights"], nlohmann::json({1.0, 0.25})) << best.dump();
    std::string sets;
    for (const nlohmann::json& x : best["config_sets"])
        sets += " --set '" + x.get<std::string>() + "'";
    EXPECT_NE(sets.find("embedding.rank_weights=[1.0,0.25]"), std::string::npos) << sets;
    const std::string run = (dir_ / "placed").string();
    const CommandResult t =
        run_zerotrain("train " + cfg + " --quiet --ranks 2 --run-dir " + run + sets);
    ASSERT_EQ(t.code, 0) << t.output;
    // The run's plan puts more of the tables' bytes on the fast rank.
    const nlohmann::json plan = nlohmann::json::parse(std::ifstream(run + "/embedding_plan.json"));
    const nlohmann::json& bytes = plan["rank_bytes"];
    ASSERT_EQ(bytes.size(), 2u) << plan.dump();
    EXPECT_GT(bytes[0].get<int64_t>(), bytes[1].get<int64_t>()) << plan.dump();
}

TEST_F(PlanCli, RanksLayoutsAndSaysWhyOthersWereRejected) {
    const std::string cfg = write_config(config());
    const std::string prof = write_profile();
    const CommandResult r =
        run_zerotrain("plan " + cfg + " --ranks 2 --json --top 3 --profile " + prof, false);
    ASSERT_EQ(r.code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    ASSERT_EQ(j["plans"].size(), 3u) << r.output;
    double last = 0;
    for (const nlohmann::json& p : j["plans"]) {  // fastest first
        const double t = p["step_time"]["total_s"].get<double>();
        EXPECT_GE(t, last);
        last = t;
        EXPECT_TRUE(p["device_bytes"].contains("activations"));
    }
    // A budget between the smallest and the largest layout: some rejected, each with a reason
    // naming its size against the budget and its largest part.
    const int64_t budget = j["plans"][0]["device_bytes"]["total"].get<int64_t>() - 1;
    const CommandResult b = run_zerotrain("plan " + cfg + " --ranks 2 --memory-budget " +
                                              std::to_string(budget) + " --profile " + prof,
                                          false);
    EXPECT_NE(b.output.find("rejected"), std::string::npos) << b.output;
    EXPECT_NE(b.output.find(" needs "), std::string::npos) << b.output;
    EXPECT_NE(b.output.find("--set 'zero_optimization.stage="), std::string::npos) << b.output;
}

TEST_F(PlanCli, InfeasibleBudgetNamesTheMinimum) {
    const std::string cfg = write_config(config());
    const CommandResult r = run_zerotrain(
        "plan " + cfg + " --ranks 2 --memory-budget 1KiB --profile " + write_profile(), false);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("no layout fits: the smallest layout ("), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("its largest part is"), std::string::npos) << r.output;
}

// train --auto runs the planner's best layout for the world, says it and records plan.json; its
// run's own check predicts the same layout. A cache directory of the test's own holds a profile
// of this machine's identity (the GEMM choice files copied, so nothing is measured).
TEST_F(PlanCli, TrainAutoRunsAndRecordsTheBestPlan) {
    const fs::path cache = dir_ / "cache";
    fs::create_directories(cache);
    const std::string real = default_gemm_cache_dir();
    std::error_code ec;
    if (!real.empty() && fs::is_directory(real, ec))
        for (const auto& f : fs::directory_iterator(real, ec))
            if (f.path().filename().string().rfind("gemm-", 0) == 0)
                fs::copy_file(f.path(), cache / f.path().filename(), ec);
    const std::string saved = std::getenv("ZT_CACHE_DIR") ? std::getenv("ZT_CACHE_DIR") : "";
    ::setenv("ZT_CACHE_DIR", cache.c_str(), 1);
    write_profile(default_profile_path(), profile_identity());
    const std::string env = "ZT_CACHE_DIR=" + cache.string() + " ";
    if (saved.empty())
        ::unsetenv("ZT_CACHE_DIR");
    else
        ::setenv("ZT_CACHE_DIR", saved.c_str(), 1);
    nlohmann::json j = config();
    j["train_batch_size"] = 4;
    const std::string cfg = write_config(j, "auto.json");
    const std::string run = (dir_ / "auto").string();
    const CommandResult r = run_command(env + ZT_BINARY + std::string(" train ") + cfg +
                                        " --auto --ranks 2 --quiet --run-dir " + run);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("train --auto: dp "), std::string::npos) << r.output;
    std::ifstream f(run + "/plan.json");
    ASSERT_TRUE(f.good());
    const nlohmann::json plan = nlohmann::json::parse(f);
    EXPECT_EQ(plan["ranks"], 2);
    // The same search by `zerotrain plan` with the profile the run ranked with puts this layout
    // first (the machine's own may lack kernel times the run took on a busy host, and near-ties
    // of this tiny model's microsecond products then rank either way).
    ASSERT_EQ(plan["profile_file"], "plan_profile.json");
    const CommandResult p =
        run_command(env + ZT_BINARY + std::string(" plan ") + cfg + " --ranks 2 --json --top 1" +
                        " --profile " + run + "/plan_profile.json",
                    false);
    ASSERT_EQ(p.code, 0) << p.output;
    EXPECT_EQ(nlohmann::json::parse(p.output)["plans"][0]["label"], plan["label"]);
    // Every step checked the layout it ran.
    std::ifstream m(run + "/metrics.jsonl");
    std::string line;
    std::getline(m, line);
    const nlohmann::json first = nlohmann::json::parse(line);
    ASSERT_TRUE(first.contains("plan")) << line;
    EXPECT_TRUE(first["plan"].contains("step_s")) << line;  // the profile was found
    // Communication: the whole of each split into exposed and overlapped parts, the exposed sum
    // in the plan field, and `plan --check` sets it beside the measured comm_s.
    ASSERT_TRUE(plan.contains("step_time")) << plan.dump();
    const nlohmann::json& st = plan["step_time"];
    for (const char* c : {"dp", "tp", "pp"})
        EXPECT_NEAR(st[std::string(c) + "_comm_s"].get<double>(),
                    st[std::string(c) + "_comm_exposed_s"].get<double>() +
                        st[std::string(c) + "_comm_overlapped_s"].get<double>(),
                    1e-12)
            << c;
    EXPECT_NEAR(st["comm_exposed_s"].get<double>(),
                st["dp_comm_exposed_s"].get<double>() + st["tp_comm_exposed_s"].get<double>() +
                    st["pp_comm_exposed_s"].get<double>(),
                1e-12);
    ASSERT_TRUE(first["plan"].contains("comm_s")) << line;
    EXPECT_NEAR(first["plan"]["comm_s"]["exposed"].get<double>(),
                st["comm_exposed_s"].get<double>(), 1e-12);
    // Ranks of unequal speed and memory reach the search: the layout --auto runs is the one
    // `plan` ranks first with the same flags, and plan.json records them.
    const std::string hetero = " --ranks 2 --rank-speed 1,0.5 --rank-memory 1GiB,512MiB";
    const std::string run2 = (dir_ / "auto_hetero").string();
    const CommandResult h = run_command(env + ZT_BINARY + std::string(" train ") + cfg +
                                        " --auto --quiet" + hetero + " --run-dir " + run2);
    ASSERT_EQ(h.code, 0) << h.output;
    const nlohmann::json hp = nlohmann::json::parse(std::ifstream(run2 + "/plan.json"));
    EXPECT_EQ(hp["rank_speed"], nlohmann::json({1.0, 0.5}));
    EXPECT_EQ(hp["rank_memory"], nlohmann::json({int64_t{1} << 30, int64_t{512} << 20}));
    const CommandResult hplan =
        run_command(env + ZT_BINARY + std::string(" plan ") + cfg + hetero + " --json --top 1" +
                        " --profile " + run2 + "/plan_profile.json",
                    false);
    ASSERT_EQ(hplan.code, 0) << hplan.output;
    EXPECT_EQ(nlohmann::json::parse(hplan.output)["plans"][0]["label"], hp["label"]);
    const CommandResult bare = run_command(std::string(ZT_BINARY) + " train " + cfg +
                                           " --quiet --rank-speed 1,0.5 --ranks 2");
    EXPECT_EQ(bare.code, 2) << bare.output;
    EXPECT_NE(bare.output.find("add --auto"), std::string::npos) << bare.output;
    const CommandResult chk =
        run_command(env + ZT_BINARY + std::string(" plan --json --check ") + run, false);
    ASSERT_EQ(chk.code, 0) << chk.output;
    const nlohmann::json summary = nlohmann::json::parse(chk.output);
    ASSERT_TRUE(summary.contains("comm_s")) << chk.output;
    EXPECT_NEAR(summary["comm_s"]["predicted_exposed"].get<double>(),
                st["comm_exposed_s"].get<double>(), 1e-12);
    EXPECT_GE(summary["comm_s"]["measured_exposed_median"].get<double>(), 0);

    // Under a tight budget (the 10th percentile of every layout's predicted peak) the chosen
    // layout runs within it: the pool's budget check would stop the run otherwise.
    const CommandResult all = run_command(
        env + ZT_BINARY + std::string(" plan ") + cfg + " --ranks 2 --json --top 0", false);
    ASSERT_EQ(all.code, 0) << all.output;
    std::vector<int64_t> peaks;
    const nlohmann::json listed = nlohmann::json::parse(all.output);
    for (const nlohmann::json& p : listed["plans"])
        peaks.push_back(p["device_bytes"]["total"].get<int64_t>());
    ASSERT_GE(peaks.size(), 10u) << all.output.substr(0, 2000);
    std::sort(peaks.begin(), peaks.end());
    const int64_t budget = peaks[peaks.size() / 10];
    const std::string tight = (dir_ / "tight").string();
    const CommandResult t = run_command(env + ZT_BINARY + std::string(" train ") + cfg +
                                        " --auto --ranks 2 --quiet --run-dir " + tight +
                                        " --memory-budget " + std::to_string(budget));
    ASSERT_EQ(t.code, 0) << "budget " << budget << ": " << t.output;
    std::ifstream tm(tight + "/metrics.jsonl");
    while (std::getline(tm, line)) {
        const nlohmann::json l = nlohmann::json::parse(line);
        if (l.contains("mem")) {
            EXPECT_LE(l["mem"]["peak"].get<int64_t>(), budget) << line;
        }
    }
}

// Note [Zero bubble memory]: a zero-bubble stage keeps each micro-batch's tape from B to W, so
// checkpointing saves less than under 1F1B. The predicted peak of that layout is a budget it
// runs within (it stopped 23% past its prediction before).
TEST_F(PlanCli, ZeroBubbleWithCheckpointingRunsWithinItsPredictedPeak) {
    nlohmann::json j = config();
    j["train_batch_size"] = 4;
    const std::string cfg = write_config(j, "zb.json");
    const CommandResult all =
        run_command(std::string(ZT_BINARY) + " plan " + cfg + " --ranks 2 --json --top 0", false);
    ASSERT_EQ(all.code, 0) << all.output;
    const std::string label =
        "dp 1 x tp 1 x pp 2, ZeRO-0, micro 2 x 2, checkpoint every, zero_bubble";
    int64_t zb = 0, gpipe = 0;
    const nlohmann::json listed = nlohmann::json::parse(all.output);
    for (const nlohmann::json& p : listed["plans"]) {
        const std::string l = p["label"];
        if (l == label) zb = p["device_bytes"]["total"].get<int64_t>();
        if (l == "dp 1 x tp 1 x pp 2, ZeRO-0, micro 2 x 2, checkpoint every, gpipe")
            gpipe = p["device_bytes"]["total"].get<int64_t>();
    }
    ASSERT_GT(zb, 0) << all.output;
    EXPECT_GT(zb, gpipe);  // the pending micro-batch is counted
    j["parallel"] = {
        {"pipeline", {{"stages", 2}, {"micro_batches", 2}, {"schedule", "zero_bubble"}}}};
    j["activation_checkpointing"] = {{"policy", "every"}};
    j["memory"] = {{"budget_per_rank", zb}};
    const CommandResult t = train_run(j, "zb", "", 2);
    ASSERT_EQ(t.code, 0) << "budget " << zb << ": " << t.output;
}

// Note [Per-layer recompute]: under a budget between "every" and "none", the plan of a per-block
// list ranks above every named policy of the same micro-batches, and the run of its --set
// arguments stays within the budget and its predicted peak.
TEST_F(PlanCli, PerBlockListFitsTheBudgetAndRunsWithinIt) {
    nlohmann::json j = config();
    j["model"]["n_layers"] = 4;
    j["model"]["d_model"] = 32;
    j["train_batch_size"] = 8;
    j["train_micro_batch_size_per_gpu"] = 8;
    const std::string cfg = write_config(j, "blocks.json");
    const std::string prof = write_profile();
    const std::string plan =
        std::string(ZT_BINARY) + " plan " + cfg + " --ranks 1 --json --top 0 --profile " + prof;
    const CommandResult all = run_command(plan, false);
    ASSERT_EQ(all.code, 0) << all.output;
    const std::string head = "dp 1 x tp 1 x pp 1, ZeRO-0, micro 8 x 1, checkpoint ";
    auto peak_of = [&](const nlohmann::json& out, const std::string& label) -> int64_t {
        for (const nlohmann::json& p : out["plans"])
            if (p["label"] == label) return p["device_bytes"]["total"].get<int64_t>();
        return 0;
    };
    const nlohmann::json free = nlohmann::json::parse(all.output);
    const int64_t none = peak_of(free, head + "none"), every = peak_of(free, head + "every");
    ASSERT_GT(every, 0) << all.output.substr(0, 2000);
    ASSERT_GT(none, every);
    const int64_t budget = every + (none - every) * 6 / 10;
    const CommandResult tight =
        run_command(plan + " --memory-budget " + std::to_string(budget), false);
    ASSERT_EQ(tight.code, 0) << tight.output;
    const nlohmann::json out = nlohmann::json::parse(tight.output);
    int listed = -1, every_at = -1, selective_at = -1;
    for (size_t i = 0; i < out["plans"].size(); ++i) {
        const std::string l = out["plans"][i]["label"];
        if (l.rfind(head + "blocks (", 0) == 0 && listed < 0) listed = static_cast<int>(i);
        if (l == head + "every") every_at = static_cast<int>(i);
        if (l == head + "selective") selective_at = static_cast<int>(i);
    }
    ASSERT_GE(listed, 0) << tight.output.substr(0, 3000);
    ASSERT_GE(every_at, 0) << tight.output.substr(0, 3000);  // "every" fits too, and is slower
    EXPECT_LT(listed, every_at);
    if (selective_at >= 0) {
        EXPECT_LT(listed, selective_at);
    }
    const nlohmann::json& p = out["plans"][static_cast<size_t>(listed)];
    EXPECT_LE(p["device_bytes"]["total"].get<int64_t>(), budget);
    EXPECT_EQ(p["strategy"]["checkpoint"], "blocks");
    ASSERT_EQ(p["strategy"]["checkpoint_blocks"].size(), 4u) << p.dump();
    std::string sets;
    bool blocks_set = false;
    for (const nlohmann::json& s : p["config_sets"]) {
        sets += " --set '" + s.get<std::string>() + "'";
        blocks_set |= s.get<std::string>().rfind("activation_checkpointing.blocks=[", 0) == 0;
    }
    EXPECT_TRUE(blocks_set) << p.dump();
    j["memory"] = {{"budget_per_rank", budget}};
    const CommandResult r = train_run(j, "blocks", sets);
    ASSERT_EQ(r.code, 0) << "budget " << budget << sets << ": " << r.output;
    const CommandResult c =
        run_zerotrain("plan --json --check " + (dir_ / "blocks").string(), false);
    ASSERT_EQ(c.code, 0) << c.output;
    const nlohmann::json peak = nlohmann::json::parse(c.output)["peak_bytes"];
    EXPECT_LE(peak["max_ratio"].get<double>(), 1.0) << peak.dump();
    EXPECT_GE(peak["min_ratio"].get<double>(), 0.9) << peak.dump();
}

// 1-bit Adam's residuals live beside the activations all step: the predicted peak covers the
// measured one once the compressed phase has begun (it fell 28% short before they were counted).
TEST_F(PlanCli, OneBitAdamPeakCoversItsResiduals) {
    nlohmann::json j = config();
    j["steps"] = 3;
    j["optimizer"] = {{"type", "OneBitAdam"}, {"params", {{"lr", 1e-3}, {"freeze_step", 1}}}};
    const CommandResult r = train_run(j, "onebit", "", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    std::ifstream f(dir_ / "onebit" / "metrics.jsonl");
    int checked = 0;
    for (std::string line; std::getline(f, line);) {
        const nlohmann::json m = nlohmann::json::parse(line);
        if (!m.contains("plan") || m.value("step", 0) < 2) continue;
        const nlohmann::json& p = m["plan"]["peak_bytes"];
        EXPECT_GE(p["predicted"].get<double>(), p["measured"].get<double>()) << line;
        ++checked;
    }
    EXPECT_EQ(checked, 2);
}

}  // namespace
}  // namespace zt::testing
