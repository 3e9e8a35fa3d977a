// comm.hierarchical as a user runs it (docs/compression.md, "Hierarchical collectives"): 4 MPI
// ranks on two "hosts" of 2 (ZT_HOST per rank, as a launcher on two machines would give two host
// names) train like the flat run within the equivalence rule's tolerance while sending a smaller
// share across hosts; on one host the run says why it stays flat and gives the flat bits. ZeRO++
// hpZ (zero_hpz_partition_size) keeps the backward's stage 3 gathers within the host: the same
// bits as stage 3 without it, fewer bytes across hosts.
#include <gtest/gtest.h>

#include <fstream>

#include "cli/cli_fixture.h"

using zt::testing::Cli;
using zt::testing::CommandResult;

namespace {

using zt::testing::kMpiEnv;

class HierarchicalCli : public Cli {
  protected:
    nlohmann::json config(bool hierarchical) {
        nlohmann::json j = tiny();
        j["steps"] = 4;
        j["train_batch_size"] = 16;
        j["gradient_accumulation_steps"] = 2;
        j["model"]["n_layers"] = 2;
        j["model"]["d_model"] = 32;
        j["data"]["builtin_tokens"] = 1 << 15;
        j["eval_interval"] = 0;
        j["zero_optimization"] = {{"stage", 2}, {"reduce_bucket_size", 3000}};
        j["comm"] = {{"hierarchical", hierarchical}};
        return j;
    }
    // mpirun with 2 ranks on host "a" and 2 on host "b".
    CommandResult two_hosts(const nlohmann::json& j, const std::string& run) {
        const std::string cfg = write_config(j, run + ".json");
        const std::string prog = std::string(ZT_BINARY) + " train " + cfg + " --quiet --run-dir " +
                                 (dir_ / run).string();
        return zt::testing::run_command(
            std::string(kMpiEnv) +
            "timeout 120 mpirun --oversubscribe --mca btl self,vader -np 2 " + "-x ZT_HOST=a " +
            prog + " : -np 2 -x ZT_HOST=b " + prog);
    }
};

}  // namespace

TEST_F(HierarchicalCli, TwoHostsTrainLikeTheFlatRunAndSendLessAcross) {
    const CommandResult flat = two_hosts(config(false), "flat");
    ASSERT_EQ(flat.code, 0) << flat.output;
    const CommandResult hier = two_hosts(config(true), "hier");
    ASSERT_EQ(hier.code, 0) << hier.output;
    EXPECT_NE(hier.output.find("2 hosts of 2 ranks"), std::string::npos) << hier.output;
    expect_close(read_run("hier"), read_run("flat"), "hierarchical vs flat");
    EXPECT_NE(read_run("hier").weights, read_run("flat").weights)
        << "the sums run in another order: not the flat bits";
    const nlohmann::json l = step_lines("hier").back();
    ASSERT_TRUE(l.contains("comm_cross_host_bytes")) << l.dump();
    int64_t total = 0;
    for (const auto& [k, v] : l["comm"].items()) total += v["bytes"].get<int64_t>();
    const int64_t cross = l["comm_cross_host_bytes"].get<int64_t>();
    // Flat, two of a rank's three peers are on the other host (2/3 of its bytes cross); in the
    // hierarchy only the cross-host phase does: a quarter of a reduce-scatter's values of the
    // three quarters sent, a third of the bytes.
    EXPECT_GT(cross, 0);
    EXPECT_LT(3 * cross, total + 64) << l.dump();
    EXPECT_FALSE(step_lines("flat").back().contains("comm_cross_host_bytes"));
}

TEST_F(HierarchicalCli, OneHostStaysFlatAndSaysWhy) {
    const CommandResult flat = train_run(config(false), "flat", "", 4);
    ASSERT_EQ(flat.code, 0) << flat.output;
    const CommandResult on = train_run(config(true), "on", "", 4);
    ASSERT_EQ(on.code, 0) << on.output;
    EXPECT_NE(on.output.find("comm.hierarchical: the data-parallel collectives stay flat: all 4 "
                             "ranks are on one host"),
              std::string::npos)
        << on.output;
    EXPECT_EQ(read_run("on").weights, read_run("flat").weights);
    nlohmann::json bad = config(false);
    bad["comm"]["hierarchical"] = "yes";
    const CommandResult r = train_run(bad, "bad", "", 4);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("comm.hierarchical"), std::string::npos) << r.output;
}

TEST_F(HierarchicalCli, HpzGathersTheBackwardsWeightsWithinTheHost) {
    auto stage3 = [&](int hpz) {
        nlohmann::json j = config(true);
        j["zero_optimization"] = {{"stage", 3},
                                  {"reduce_bucket_size", 3000},
                                  {"stage3_param_persistence_threshold", 100},
                                  {"stage3_prefetch_bucket_size", 2000},
                                  {"zero_hpz_partition_size", hpz}};
        return j;
    };
    const CommandResult plain = two_hosts(stage3(1), "plain");
    ASSERT_EQ(plain.code, 0) << plain.output;
    const CommandResult hpz = two_hosts(stage3(2), "hpz");
    ASSERT_EQ(hpz.code, 0) << hpz.output;
    const RunLog a = read_run("plain"), b = read_run("hpz");
    ASSERT_EQ(a.loss.size(), 4u);
    EXPECT_EQ(a.loss, b.loss);  // gathers copy: the same weights, the same bits
    EXPECT_EQ(a.weights, b.weights);
    const int64_t across = step_lines("plain").back()["comm_cross_host_bytes"].get<int64_t>();
    const int64_t across_hpz = step_lines("hpz").back()["comm_cross_host_bytes"].get<int64_t>();
    std::printf("[ hpz ] bytes across hosts per step: %lld without, %lld with\n",
                static_cast<long long>(across), static_cast<long long>(across_hpz));
    // The backward's gathers (about half of the gather traffic) no longer cross hosts.
    EXPECT_LT(across_hpz, across * 0.8);
    // On one host too (threads), hpZ gives the plain stage 3 bits.
    const CommandResult t1 = train_run(stage3(1), "t1", "", 4);
    const CommandResult t2 = train_run(stage3(2), "t2", "", 4);
    ASSERT_EQ(t1.code, 0) << t1.output;
    ASSERT_EQ(t2.code, 0) << t2.output;
    EXPECT_EQ(read_run("t1").weights, read_run("t2").weights);
}

TEST_F(HierarchicalCli, PriorityChannelChangesNoBits) {
    // comm.priority (on by default): stage 3's gathers on a group of their own, under mpirun with
    // overlap and prefetch, flat and hierarchical; the bits of the single-channel run.
    for (const bool hierarchical : {false, true}) {
        auto cfg = [&](bool priority) {
            nlohmann::json j = config(hierarchical);
            j["zero_optimization"] = {{"stage", 3},
                                      {"overlap_comm", true},
                                      {"reduce_bucket_size", 3000},
                                      {"stage3_param_persistence_threshold", 100},
                                      {"stage3_prefetch_bucket_size", 2000}};
            j["comm"]["priority"] = priority;
            return j;
        };
        const std::string h = hierarchical ? "h" : "f";
        const CommandResult a = two_hosts(cfg(false), "fifo" + h);
        ASSERT_EQ(a.code, 0) << a.output;
        const CommandResult b = two_hosts(cfg(true), "prio" + h);
        ASSERT_EQ(b.code, 0) << b.output;
        const RunLog x = read_run("fifo" + h), y = read_run("prio" + h);
        ASSERT_EQ(x.loss.size(), 4u);
        EXPECT_EQ(x.loss, y.loss) << h;
        EXPECT_EQ(x.weights, y.weights) << h;
    }
}
