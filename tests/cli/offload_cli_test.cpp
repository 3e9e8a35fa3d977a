// ZeRO-Offload as a user runs it (docs/offload.md): zero_optimization.offload_optimizer with device
// "cpu" or "nvme" trains bit for bit like the same layout without offload, at every stage, on 1
// and 2 ranks; checkpoints of offloaded runs resume with or without offload, bit for bit; a model
// whose states do not fit the per-rank budget is refused with a report that names offload, and
// trains with it; a bad nvme_path stops the run before its first step with exit 2.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>

#include "checkpoint/safetensors.h"
#include "cli/cli_fixture.h"
#include "util/error.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

class Offload : public Cli {
  protected:
    nlohmann::json config(int steps, int ranks, int stage, const std::string& precision) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 4;
        j["train_micro_batch_size_per_gpu"] = 4 / ranks;
        j["gradient_clipping"] = 1.0;
        j["data"]["builtin_tokens"] = 1 << 15;
        j.erase("eval_interval");
        j["optimizer"]["params"]["weight_decay"] = 0.1;
        j["zero_optimization"] = {{"stage", stage}};
        if (precision == "bf16") j["bf16"] = {{"enabled", true}};
        return j;
    }
    // The same config with the optimizer offloaded to `device`, in sub-groups small enough that
    // the tiny model's state streams through several of them.
    nlohmann::json offloaded(nlohmann::json j, const std::string& device) {
        nlohmann::json o = {{"device", device}, {"buffer_count", 3}};
        if (device == "nvme") o["nvme_path"] = (dir_ / "swap").string();
        fs::create_directories(dir_ / "swap");
        j["zero_optimization"]["offload_optimizer"] = o;
        j["zero_optimization"]["sub_group_size"] = 3000;
        return j;
    }
    // Stage 3 with the parameters on `device` too (ZeRO-Infinity).
    nlohmann::json params_offloaded(nlohmann::json j, const std::string& device) {
        j = offloaded(std::move(j), device);
        nlohmann::json p = {{"device", device}};
        if (device == "nvme") p["nvme_path"] = (dir_ / "swap").string();
        j["zero_optimization"]["offload_param"] = p;
        return j;
    }
    CommandResult train(const nlohmann::json& j, const std::string& run, const std::string& args,
                        int ranks = 1) {
        return train_run(j, run, args, ranks);
    }
    RunLog read(const std::string& run) { return read_run(run); }
};

}  // namespace

TEST_F(Offload, OffloadedRunsTrainBitForBitLikeInMemory) {
    struct Case {
        int ranks, stage;
        const char* precision;
        const char* device;
    };
    for (const Case c :
         {Case{1, 0, "fp32", "cpu"}, Case{1, 1, "bf16", "cpu"}, Case{2, 2, "bf16", "cpu"},
          Case{2, 3, "fp32", "cpu"}, Case{1, 2, "bf16", "nvme"}, Case{2, 1, "fp32", "nvme"},
          Case{2, 3, "bf16", "nvme"}}) {
        const std::string tag = std::to_string(c.ranks) + "r_s" + std::to_string(c.stage) + "_" +
                                c.precision + "_" + c.device;
        const nlohmann::json plain = config(6, c.ranks, c.stage, c.precision);
        ASSERT_EQ(train(plain, "plain_" + tag, "", c.ranks).code, 0) << tag;
        CommandResult r = train(offloaded(plain, c.device), "off_" + tag, "", c.ranks);
        ASSERT_EQ(r.code, 0) << tag << r.output;
        const RunLog a = read("plain_" + tag), b = read("off_" + tag);
        ASSERT_EQ(a.loss.size(), 6u);
        EXPECT_EQ(a.loss, b.loss) << tag;
        EXPECT_EQ(a.weights, b.weights) << tag;
        EXPECT_LT(b.loss.back(), b.loss.front()) << tag << ": the loss falls";
        // Swap files go at exit.
        if (std::string(c.device) == "nvme") {
            EXPECT_TRUE(fs::is_empty(dir_ / "swap")) << tag;
        }
    }
}

TEST_F(Offload, CheckpointsResumeWithAndWithoutOffloadBitForBit) {
    for (const std::string device : {"cpu", "nvme"}) {
        const nlohmann::json plain = config(8, 2, 2, "bf16");
        nlohmann::json full = plain;
        full["checkpoint"] = {{"interval_steps", 4}};
        ASSERT_EQ(train(full, "full_" + device, "", 2).code, 0);
        const RunLog ref = read("full_" + device);
        // Offloaded to step 4, resumed in memory; and in memory to step 4, resumed offloaded.
        for (const bool offload_first : {true, false}) {
            const std::string run = device + (offload_first ? "_then_memory" : "_then_offload");
            nlohmann::json first = offload_first ? offloaded(full, device) : full;
            first["steps"] = 4;
            ASSERT_EQ(train(first, run, "", 2).code, 0) << run;
            nlohmann::json second = offload_first ? full : offloaded(full, device);
            CommandResult r = train(second, run, "--resume", 2);
            ASSERT_EQ(r.code, 0) << run << r.output;
            const RunLog got = read(run);
            EXPECT_EQ(got.loss, ref.loss) << run;
            EXPECT_EQ(got.weights, ref.weights) << run;
        }
    }
}

// Model states of 18 bytes per parameter (bf16 weights, f32 gradients, master weights and Adam's
// two moments) past a budget that 6 bytes per parameter fit: refused before the first step with a
// report that names offload and what it would take, and trained with it, the optimizer's bytes
// off the budget.
TEST_F(Offload, ModelStatesPastTheBudgetTrainOnlyWithOffload) {
    nlohmann::json j = config(4, 1, 1, "bf16");
    j["train_batch_size"] = 2;
    j["train_micro_batch_size_per_gpu"] = 2;
    j["model"] = {{"type", "gpt"}, {"vocab_size", 256}, {"seq_len", 16},
                  {"d_model", 64}, {"n_layers", 2},     {"n_heads", 2}};
    j["memory"] = {{"budget_per_rank", "1.5MiB"}};
    CommandResult r = train(j, "in_memory", "");
    EXPECT_EQ(r.code, 2) << r.output;
    for (const char* s :
         {"out of memory before the first step", "optimizer: 918.00 KiB", "offload the optimizer",
          "offload_optimizer {\"device\": \"cpu\"}", "per rank, docs/offload.md"})
        EXPECT_NE(r.output.find(s), std::string::npos) << s << " in:\n" << r.output;
    r = train(offloaded(j, "cpu"), "offloaded", "");
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog got = read("offloaded");
    EXPECT_LT(got.loss.back(), got.loss.front());
    std::ifstream f(dir_ / "offloaded" / "metrics.jsonl");
    std::string line;
    int steps = 0;
    while (std::getline(f, line)) {
        const auto m = nlohmann::json::parse(line);
        if (!m.contains("loss")) continue;
        ++steps;
        EXPECT_EQ(m["mem"]["optimizer"].get<int64_t>(), 0) << "the state lives on the host tier";
        EXPECT_LE(m["mem"]["peak"].get<int64_t>(), int64_t{3} << 19);
        EXPECT_EQ(m["offload"]["tier"], "cpu");
        // Every step moves each f32 gradient out and each bf16 weight back once.
        EXPECT_EQ(m["offload"]["d2h_bytes"].get<int64_t>(), 117504 * 4);
        EXPECT_EQ(m["offload"]["h2d_bytes"].get<int64_t>(), 117504 * 2);
    }
    EXPECT_EQ(steps, 4);
}

// Note [Gradients on the host]: with the optimizer offloaded at stages 2-3 the owned gradients
// leave the device budget (metrics' mem.grads is 0, against the shard's bytes without offload),
// the estimator puts them on the host, and the training is the same to the bit.
TEST_F(Offload, GradientsLiveOnTheHostAtStages2And3) {
    struct Case {
        int ranks, stage;
        const char* precision;
        const char* device;
    };
    for (const Case c : {Case{2, 2, "fp32", "cpu"}, Case{1, 3, "bf16", "nvme"}}) {
        const std::string tag = std::to_string(c.ranks) + "r_s" + std::to_string(c.stage) + "_" +
                                c.precision + "_" + c.device;
        const nlohmann::json plain = config(3, c.ranks, c.stage, c.precision);
        ASSERT_EQ(train(plain, "plain_" + tag, "", c.ranks).code, 0) << tag;
        const nlohmann::json off = offloaded(plain, c.device);
        const CommandResult r = train(off, "off_" + tag, "", c.ranks);
        ASSERT_EQ(r.code, 0) << tag << r.output;
        EXPECT_EQ(read("plain_" + tag).weights, read("off_" + tag).weights) << tag;
        // The estimator's view of the same layout: the shard's gradients on the host.
        const CommandResult e = zt::testing::run_zerotrain(zt::str_cat(
            "estimate ", write_config(off, tag + ".json"), " --ranks ", c.ranks, " --json"));
        ASSERT_EQ(e.code, 0) << e.output;
        const nlohmann::json est = nlohmann::json::parse(e.output);
        const int64_t shard = est["shard_numel"].get<int64_t>();
        const int64_t g = 4;  // f32 gradients (grad_accum_dtype's default)
        EXPECT_EQ(est["device"]["grads"].get<int64_t>(), 0) << tag;
        EXPECT_GE(est["host"]["grads"].get<int64_t>(), shard * g) << tag;
        const std::vector<nlohmann::json> on = step_lines("off_" + tag);
        const std::vector<nlohmann::json> in = step_lines("plain_" + tag);
        ASSERT_EQ(on.size(), 3u);
        ASSERT_EQ(in.size(), 3u);
        for (size_t k = 0; k < on.size(); ++k) {
            EXPECT_EQ(on[k]["mem"]["grads"].get<int64_t>(), 0) << tag;
            EXPECT_GE(in[k]["mem"]["grads"].get<int64_t>(), shard * g) << tag;
            // The gradients still cross once a step, as each bucket's reduction lands.
            EXPECT_EQ(on[k]["offload"]["d2h_bytes"].get<int64_t>(), shard * 4) << tag;
        }
    }
}

// Note [Partial offload]: offload_optimizer.ratio r keeps the first part of each rank's update
// range in memory and the rest on the tier. The run trains to the bits of the in-memory one,
// resumes across ratios, and its device optimizer bytes are exactly the estimator's.
TEST_F(Offload, PartialOffloadTrainsBitForBitWithPartOfTheStateInMemory) {
    struct Case {
        int ranks, stage;
        const char* precision;
        const char* device;
        double ratio;
    };
    for (const Case c : {Case{1, 1, "bf16", "cpu", 0.5}, Case{2, 2, "fp32", "nvme", 0.3},
                         Case{2, 3, "bf16", "cpu", 0.75}}) {
        const std::string tag = std::to_string(c.ranks) + "r_s" + std::to_string(c.stage) + "_" +
                                c.precision + "_" + c.device;
        const nlohmann::json plain = config(4, c.ranks, c.stage, c.precision);
        ASSERT_EQ(train(plain, "plain_" + tag, "", c.ranks).code, 0) << tag;
        nlohmann::json part = offloaded(plain, c.device);
        part["zero_optimization"]["offload_optimizer"]["ratio"] = c.ratio;
        const CommandResult r = train(part, "part_" + tag, "", c.ranks);
        ASSERT_EQ(r.code, 0) << tag << r.output;
        EXPECT_EQ(read("plain_" + tag).loss, read("part_" + tag).loss) << tag;
        EXPECT_EQ(read("plain_" + tag).weights, read("part_" + tag).weights) << tag;
        const CommandResult e =
            zt::testing::run_zerotrain(zt::str_cat("estimate ", write_config(part, tag + ".json"),
                                                   " --ranks ", c.ranks, " --json"));
        ASSERT_EQ(e.code, 0) << e.output;
        const nlohmann::json est = nlohmann::json::parse(e.output);
        const int64_t device_optimizer = est["device"]["optimizer"].get<int64_t>();
        const int64_t tier_optimizer = est[c.device == std::string("cpu") ? "host" : "nvme"]
                                          ["optimizer"].get<int64_t>();
        // Adam's two moments, split by the ratio.
        const double share = static_cast<double>(tier_optimizer) /
                             static_cast<double>(tier_optimizer + device_optimizer);
        EXPECT_NEAR(share, c.ratio, 0.01) << tag;
        const std::vector<nlohmann::json> in = step_lines("plain_" + tag);
        const std::vector<nlohmann::json> on = step_lines("part_" + tag);
        ASSERT_EQ(on.size(), 4u);
        for (size_t k = 0; k < on.size(); ++k) {
            EXPECT_EQ(on[k]["mem"]["optimizer"].get<int64_t>(), device_optimizer) << tag;
            EXPECT_LT(on[k]["mem"]["optimizer"].get<int64_t>(),
                      in[k]["mem"]["optimizer"].get<int64_t>())
                << tag;
            EXPECT_EQ(on[k]["offload"]["tier"], c.device) << tag;
        }
    }
    // Resumed across ratios: half offloaded to step 2, then all offloaded, then in memory.
    nlohmann::json j = config(6, 2, 2, "bf16");
    j["checkpoint"] = {{"interval_steps", 2}};
    ASSERT_EQ(train(j, "ref", "", 2).code, 0);
    nlohmann::json half = offloaded(j, "nvme");
    half["zero_optimization"]["offload_optimizer"]["ratio"] = 0.5;
    half["steps"] = 2;
    ASSERT_EQ(train(half, "mixed", "", 2).code, 0);
    nlohmann::json all = offloaded(j, "cpu");
    all["steps"] = 4;
    CommandResult r = train(all, "mixed", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    r = train(j, "mixed", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(read("mixed").loss, read("ref").loss);
    EXPECT_EQ(read("mixed").weights, read("ref").weights);
}

// A missing, unwritable or too small nvme_path stops the run before its first step, with exit 2
// and a message that names the path (and, when too small, how much is needed).
TEST_F(Offload, BadNvmePathsStopBeforeTheFirstStep) {
    const nlohmann::json plain = config(3, 1, 1, "bf16");
    auto expect_refused = [&](const nlohmann::json& j, const std::string& run,
                              std::vector<std::string> says) {
        CommandResult r = train(j, run, "");
        EXPECT_EQ(r.code, 2) << run << r.output;
        for (const std::string& s : says)
            EXPECT_NE(r.output.find(s), std::string::npos) << run << ": " << s << " in\n"
                                                           << r.output;
        EXPECT_FALSE(fs::exists(dir_ / run / "metrics.jsonl") &&
                     fs::file_size(dir_ / run / "metrics.jsonl") > 0)
            << run << ": no step ran";
    };
    nlohmann::json missing = offloaded(plain, "nvme");
    missing["zero_optimization"]["offload_optimizer"]["nvme_path"] = (dir_ / "nowhere").string();
    expect_refused(missing, "missing", {(dir_ / "nowhere").string()});
    std::ofstream(dir_ / "a_file") << "x";
    nlohmann::json file = offloaded(plain, "nvme");
    file["zero_optimization"]["offload_optimizer"]["nvme_path"] = (dir_ / "a_file").string();
    expect_refused(file, "not_a_dir", {(dir_ / "a_file").string()});
    // Too small: a 32 KiB file system (a tmpfs, where this machine lets the test mount one) for
    // a swap file of 72 KiB (two sub-groups of 3072 elements x 3 f32 tensors).
    fs::create_directories(dir_ / "tiny");
    const std::string tiny = (dir_ / "tiny").string();
    if (std::system(("mount -t tmpfs -o size=32k tmpfs " + tiny + " 2>/dev/null").c_str()) == 0) {
        nlohmann::json small = offloaded(plain, "nvme");
        small["zero_optimization"]["offload_optimizer"]["nvme_path"] = tiny;
        expect_refused(small, "too_small", {tiny, "needs 73728 bytes", "free"});
        EXPECT_EQ(std::system(("umount " + tiny).c_str()), 0);
    } else {
        std::printf(
            "[ note ] no tmpfs mount here: the too-small case is left to NvmeStore's tests\n");
    }
    if (::geteuid() != 0) {  // root writes anywhere
        fs::create_directories(dir_ / "ro");
        ::chmod((dir_ / "ro").c_str(), 0555);
        nlohmann::json ro = offloaded(plain, "nvme");
        ro["zero_optimization"]["offload_optimizer"]["nvme_path"] = (dir_ / "ro").string();
        expect_refused(ro, "read_only", {(dir_ / "ro").string()});
    }
}

// ZeRO-Infinity: stage 3 with the optimizer state and the parameters on a tier (each module's
// slice read before it is gathered, the updated slices written by the offloaded step) trains
// bit for bit like stage 3 in memory, on 1 and 2 ranks; its checkpoint resumes in memory.
TEST_F(Offload, ParametersOffloadedAtStage3TrainBitForBit) {
    struct Case {
        int ranks;
        const char* precision;
        const char* device;
    };
    for (const Case c : {Case{1, "bf16", "nvme"}, Case{2, "bf16", "nvme"}, Case{2, "fp32", "cpu"},
                         Case{1, "fp32", "nvme"}}) {
        const std::string tag = std::to_string(c.ranks) + "r_" + c.precision + "_" + c.device;
        nlohmann::json plain = config(6, c.ranks, 3, c.precision);
        plain["zero_optimization"]["stage3_param_persistence_threshold"] = 0;  // all gathered
        plain["zero_optimization"]["stage3_prefetch_bucket_size"] = 600;
        plain["checkpoint"] = {{"interval_steps", 3}};
        ASSERT_EQ(train(plain, "plain_" + tag, "", c.ranks).code, 0) << tag;
        const nlohmann::json off = params_offloaded(plain, c.device);
        CommandResult r = train(off, "inf_" + tag, "", c.ranks);
        ASSERT_EQ(r.code, 0) << tag << r.output;
        const RunLog a = read("plain_" + tag), b = read("inf_" + tag);
        ASSERT_EQ(a.loss.size(), 6u);
        EXPECT_EQ(a.loss, b.loss) << tag;
        EXPECT_EQ(a.weights, b.weights) << tag;
        // The weights are not in the budget: only gathered modules are, for their use.
        std::ifstream f(dir_ / ("inf_" + tag) / "metrics.jsonl");
        std::string line;
        while (std::getline(f, line)) {
            const auto m = nlohmann::json::parse(line);
            if (m.contains("loss")) {
                EXPECT_EQ(m["mem"]["optimizer"].get<int64_t>(), 0) << tag;
            }
        }
        // The offloaded run's step-3 checkpoint resumes in memory to the same end.
        nlohmann::json part = off;
        part["steps"] = 3;
        ASSERT_EQ(train(part, "mix_" + tag, "", c.ranks).code, 0) << tag;
        r = train(plain, "mix_" + tag, "--resume", c.ranks);
        ASSERT_EQ(r.code, 0) << tag << r.output;
        EXPECT_EQ(read("mix_" + tag).weights, a.weights) << tag;
        if (std::string(c.device) == "nvme") {
            EXPECT_TRUE(fs::is_empty(dir_ / "swap")) << tag;
        }
    }
    // Refused where it cannot work: below stage 3, or without the optimizer offloaded.
    nlohmann::json s2 = params_offloaded(config(2, 1, 2, "bf16"), "cpu");
    CommandResult r = train(s2, "stage2", "");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.output.find("offload_param"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("stage 3"), std::string::npos) << r.output;
    nlohmann::json no_opt = params_offloaded(config(2, 1, 3, "bf16"), "cpu");
    no_opt["zero_optimization"]["offload_optimizer"] = {{"device", "none"}};
    r = train(no_opt, "no_opt", "");
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.output.find("offload_optimizer too"), std::string::npos) << r.output;
}
