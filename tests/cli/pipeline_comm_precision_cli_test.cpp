// parallel.pipeline.comm_precision (docs/compression.md): the activations sent forward and the
// gradients sent backward between stages travel as a codec's bytes. fp32 is the plain run bit
// for bit with every schedule; a lossy codec changes the bits (it is applied) with metrics that
// match its formula; bf16 trains the default example (examples/gpt-tiny.json, few steps) within
// 2% of the uncompressed final loss; threads and mpirun decode the same bits; what cannot work
// exits 2 before the first step.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli/cli_fixture.h"
#include "util/error.h"

namespace zt::testing {
namespace {

class PipelineCommCli : public Cli {
  protected:
    // 8 samples a step in 4 micro-batches of 2 over 2 stages; 4 layers.
    nlohmann::json config(int steps, const std::string& schedule, int v = 1) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 8;
        j["train_micro_batch_size_per_gpu"] = 2;
        j["data"]["builtin_tokens"] = 1 << 15;
        j["model"]["n_heads"] = 4;
        j["model"]["n_layers"] = 4;
        j["eval_interval"] = steps;  // evaluation through the pipeline at the end
        j["optimizer"]["params"] = {{"lr", 3e-3}};
        j["parallel"]["pipeline"] = {
            {"stages", 2}, {"schedule", schedule}, {"virtual_stages", v}, {"micro_batches", 4}};
        return j;
    }
    static nlohmann::json with(nlohmann::json j, const nlohmann::json& precision) {
        j["parallel"]["pipeline"]["comm_precision"] = precision;
        return j;
    }
    void train_ok(const nlohmann::json& j, const std::string& run, int ranks = 2) {
        const CommandResult r = train_run(j, run, "", ranks);
        ASSERT_EQ(r.code, 0) << run << ": " << r.output;
    }
    // The last step line's pipeline.comm_compression (null when absent).
    nlohmann::json comm(const std::string& run) {
        nlohmann::json last;
        std::ifstream f(dir_ / run / "metrics.jsonl");
        for (std::string line; std::getline(f, line);) {
            const auto j = nlohmann::json::parse(line);
            if (j.contains("loss") && j.contains("pipeline"))
                last = j["pipeline"].value("comm_compression", nlohmann::json());
        }
        return last;
    }
};

TEST_F(PipelineCommCli, Fp32IsThePlainRunAndLossyCodecsApplyWithEverySchedule) {
    struct Sched {
        std::string name;
        int v;
    };
    for (const Sched& s :
         {Sched{"gpipe", 1}, Sched{"1f1b", 1}, Sched{"interleaved", 2}, Sched{"zero_bubble", 1}}) {
        train_ok(config(3, s.name, s.v), s.name + "_plain");
        train_ok(with(config(3, s.name, s.v), "fp32"), s.name + "_fp32");
        const RunLog plain = read_run(s.name + "_plain"), f32 = read_run(s.name + "_fp32");
        ASSERT_EQ(plain.loss.size(), 3u) << s.name;
        EXPECT_EQ(f32.loss, plain.loss) << s.name;
        EXPECT_EQ(f32.weights, plain.weights) << s.name;
        EXPECT_TRUE(comm(s.name + "_fp32").is_null()) << s.name;

        train_ok(with(config(3, s.name, s.v), {{"forward", "int8"}, {"backward", "bf16"}}),
                 s.name + "_int8");
        const RunLog q = read_run(s.name + "_int8");
        EXPECT_NE(q.weights, plain.weights) << s.name;
        EXPECT_LE(std::fabs(q.loss.back() / plain.loss.back() - 1), 0.02) << s.name;
        const nlohmann::json m = comm(s.name + "_int8");
        ASSERT_TRUE(m.is_object()) << s.name;
        EXPECT_EQ(m["forward"], "int8");
        EXPECT_EQ(m["backward"], "bf16");
        // The boundary tensors are (2, 16, 16) f32 = 512 values: int8 sends 512 + 2 scales of
        // 4 bytes against 2048, bf16 1024; each stage sends one direction per micro-batch
        // and chunk, so the ratio is between theirs.
        const double r8 = 2048.0 / (512 + 8), r16 = 2.0;
        EXPECT_GE(m["ratio"].get<double>(), std::min(r8, r16) * (1 - 1e-9)) << s.name;
        EXPECT_LE(m["ratio"].get<double>(), std::max(r8, r16) * (1 + 1e-9)) << s.name;
        EXPECT_GT(m["relative_error"].get<double>(), 0.0) << s.name;
        // int8 errs by at most half a step of max|block| / 127 a value; fp32 activations of
        // this model have max / rms of a few, so well under 2^-4 (seen: about 0.005).
        EXPECT_LT(m["relative_error"].get<double>(), std::ldexp(1.0, -4)) << s.name;
    }
}

TEST_F(PipelineCommCli, Bf16TrainsTheDefaultExampleWithinTwoPercent) {
    // examples/gpt-tiny.json, 40 steps (its schedule shortened to match), 2 stages of 1 layer,
    // 4 micro-batches of 8.
    nlohmann::json j = nlohmann::json::parse(
        std::ifstream(std::string(ZT_SOURCE_DIR) + "/examples/gpt-tiny.json"));
    j["steps"] = 40;
    j["steps_per_print"] = 1;
    j["scheduler"]["params"]["warmup_num_steps"] = 4;
    j["scheduler"]["params"]["total_num_steps"] = 40;
    j["train_micro_batch_size_per_gpu"] = 8;
    j["gradient_accumulation_steps"] = 4;
    j["eval_interval"] = 0;
    j["threads"] = 1;
    j["parallel"]["pipeline"] = {{"stages", 2}, {"micro_batches", 4}};
    train_ok(j, "plain");
    train_ok(with(j, "bf16"), "bf16");
    const double ref = read_run("plain").loss.back(), got = read_run("bf16").loss.back();
    std::printf("[ pipe comm ] bf16: final loss %.5f against %.5f (%+.2f%%)\n", got, ref,
                100 * (got / ref - 1));
    EXPECT_LE(std::fabs(got / ref - 1), 0.02);
    const nlohmann::json m = comm("bf16");
    ASSERT_TRUE(m.is_object());
    EXPECT_DOUBLE_EQ(m["ratio"].get<double>(), 2.0);  // (8, 64, 64) f32 in 2 bytes each
    EXPECT_LE(m["relative_error"].get<double>(), std::ldexp(1.0, -8));  // bf16's unit roundoff
}

TEST_F(PipelineCommCli, ThreadsAndMpiDecodeTheSameBits) {
    const nlohmann::json j = with(config(3, "1f1b"), {{"forward", "fp8"}, {"backward", "int8"}});
    expect_threads_equal_mpirun(j, 3);
}

// dp 2 x pp 2 on 4 ranks with ZeRO-1: each dp replica's stage pair talks through the codec
// while the stages' gradients are reduced over dp. fp32 is the plain run bit for bit; a lossy
// codec is applied and trains within 2% of it.
TEST_F(PipelineCommCli, ComposesWithDataParallelAndZero) {
    nlohmann::json j = config(3, "1f1b");
    j["train_batch_size"] = 16;
    j["zero_optimization"] = {{"stage", 1}};
    train_ok(j, "dp_plain", 4);
    train_ok(with(j, "fp32"), "dp_fp32", 4);
    train_ok(with(j, {{"forward", "int8"}, {"backward", "fp8"}}), "dp_int8", 4);
    const RunLog plain = read_run("dp_plain"), f32 = read_run("dp_fp32"), q = read_run("dp_int8");
    ASSERT_EQ(plain.loss.size(), 3u);
    EXPECT_EQ(f32.loss, plain.loss);
    EXPECT_EQ(f32.weights, plain.weights);
    ASSERT_EQ(q.loss.size(), 3u);
    EXPECT_NE(q.weights, plain.weights);
    EXPECT_LE(std::fabs(q.loss.back() / plain.loss.back() - 1), 0.02);
    const nlohmann::json m = comm("dp_int8");
    ASSERT_TRUE(m.is_object());
    EXPECT_EQ(m["forward"], "int8");
    EXPECT_GT(m["ratio"].get<double>(), 2.0);
}

TEST_F(PipelineCommCli, WhatCannotWorkIsRefusedBeforeTheFirstStep) {
    struct Bad {
        nlohmann::json cfg;
        std::string says;
    };
    nlohmann::json one = with(config(2, "1f1b"), "bf16");
    one["parallel"]["pipeline"]["stages"] = 1;
    const Bad bad[] = {
        {with(config(2, "1f1b"), "topk"), "parallel.pipeline.comm_precision"},
        {with(config(2, "1f1b"), {{"backward", "int4"}}),
         "parallel.pipeline.comm_precision.backward"},
        {one, "with 1 stage nothing travels between stages"},
    };
    int k = 0;
    for (const Bad& b : bad) {
        const std::string run = "bad" + std::to_string(k++);
        const CommandResult r =
            train_run(b.cfg, run, "", b.cfg["parallel"]["pipeline"]["stages"].get<int>());
        EXPECT_EQ(r.code, 2) << b.says << ": " << r.output;
        EXPECT_NE(r.output.find(b.says), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(dir_ / run / "metrics.jsonl")) << b.says;
    }
}

}  // namespace
}  // namespace zt::testing
