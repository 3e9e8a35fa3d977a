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

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

struct RunLog {
    std::vector<double> loss;  // by step
    std::vector<float> weights;
};

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
    CommandResult train(const nlohmann::json& j, const std::string& run, const std::string& args,
                        int ranks = 1) {
        const std::string cfg = write_config(j, run + ".json");
        return zt::testing::run_zerotrain("train " + cfg + " --quiet --run-dir " +
                                          (dir_ / run).string() +
                                          (ranks > 1 ? " --ranks " + std::to_string(ranks) : "") +
                                          " " + args);
    }
    RunLog read(const std::string& run) {
        RunLog r;
        std::ifstream f(dir_ / run / "metrics.jsonl");
        std::string line;
        while (std::getline(f, line)) {
            auto j = nlohmann::json::parse(line);
            if (!j.contains("loss")) continue;
            const size_t step = j["step"].get<size_t>();
            if (r.loss.size() < step) r.loss.resize(step, std::nan(""));
            r.loss[step - 1] = j["loss"];
        }
        zt::SafetensorsFile w((dir_ / run / "model.safetensors").string());
        for (const auto& t : w.tensors()) {
            std::vector<float> v(static_cast<size_t>(t.numel));
            w.read_f32(t.name, v.data(), t.numel);
            r.weights.insert(r.weights.end(), v.begin(), v.end());
        }
        return r;
    }
};

}  // namespace

TEST_F(Offload, OffloadedRunsTrainBitForBitLikeInMemory) {
    struct Case {
        int ranks, stage;
        const char* precision;
        const char* device;
    };
    for (const Case c : {Case{1, 0, "fp32", "cpu"}, Case{1, 1, "bf16", "cpu"},
                         Case{2, 2, "bf16", "cpu"}, Case{2, 3, "fp32", "cpu"}}) {
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
    }
}

TEST_F(Offload, CheckpointsResumeWithAndWithoutOffloadBitForBit) {
    for (const std::string device : {"cpu"}) {
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
