// Compressed gradient communication as a user runs it (docs/compression.md):
// "compression": {"gradients": {"type": ...}}. The lossless codec (f32) travels the compressed
// path (all-to-all of encoded segments, rank-order decode, all-gather of the encoded sums) and
// must train bit for bit like the plain collectives at every ZeRO stage, with tensor and
// pipeline parallelism and beside sharded embeddings; the lossy codecs train within 2% of the
// uncompressed final loss with metrics that match the codec's formula; threads and mpirun
// decode the same bits; what cannot compose is refused before the first step.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli/cli_fixture.h"
#include "cli/dlrm_cli_util.h"
#include "util/error.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

class GradCompressionCli : public Cli {
  protected:
    // 8 samples a step over `dp` ranks, 2 micro-steps each (Cli::bucketed).
    nlohmann::json config(int steps, int dp, int stage) { return bucketed(steps, 4 / dp, stage); }
    static nlohmann::json with(nlohmann::json j, const nlohmann::json& gradients) {
        j["compression"]["gradients"] = gradients;
        return j;
    }
    void train_ok(const nlohmann::json& j, const std::string& run, int ranks,
                  const std::string& args = "") {
        const CommandResult r = train_run(j, run, args, ranks);
        ASSERT_EQ(r.code, 0) << run << ": " << r.output;
    }
};

}  // namespace

TEST_F(GradCompressionCli, LosslessCodecTrainsBitForBitAtEveryStage) {
    for (int stage = 0; stage <= 3; ++stage) {
        const std::string s = std::to_string(stage);
        train_ok(config(4, 2, stage), "plain" + s, 2);
        train_ok(with(config(4, 2, stage), {{"type", "f32"}}), "f32_" + s, 2);
        const RunLog plain = read_run("plain" + s), f32 = read_run("f32_" + s);
        ASSERT_EQ(plain.loss.size(), 4u);
        EXPECT_EQ(f32.loss, plain.loss) << "stage " << stage;
        EXPECT_EQ(f32.weights, plain.weights) << "stage " << stage;
        // The compressed path ran: its bytes are in the metrics (f32: as many as the plain op).
        const nlohmann::json g = step_lines("f32_" + s).back()["compression"]["gradients"];
        EXPECT_EQ(g["codec"], "f32");
        EXPECT_GT(g["wire_bytes"].get<int64_t>(), 0);
        EXPECT_EQ(g["raw_bytes"], g["wire_bytes"]);
    }
}

TEST_F(GradCompressionCli, LosslessCodecWithTensorAndPipelineParallel) {
    // 4 ranks: dp 2 x tensor 2, then dp 2 x pipeline 2; the dp group's reductions compress.
    for (const std::string mesh : {"tensor", "pipeline"}) {
        nlohmann::json j = config(3, 2, 1);
        j["model"]["n_heads"] = 4;
        if (mesh == "tensor")
            j["parallel"]["tensor"] = 2;
        else
            j["parallel"]["pipeline"] = {{"stages", 2}, {"micro_batches", 2}};
        train_ok(j, mesh + "_plain", 4);
        train_ok(with(j, {{"type", "f32"}}), mesh + "_f32", 4);
        const RunLog plain = read_run(mesh + "_plain"), f32 = read_run(mesh + "_f32");
        ASSERT_EQ(plain.loss.size(), 3u) << mesh;
        EXPECT_EQ(f32.loss, plain.loss) << mesh;
        EXPECT_EQ(f32.weights, plain.weights) << mesh;
    }
}

TEST_F(GradCompressionCli, LossyCodecsConvergeNearTheUncompressedLoss) {
    // Recommended settings (docs/compression.md); 40 steps of the tiny model on 2 ranks.
    train_ok(config(40, 2, 0), "plain", 2);
    const double ref = read_run("plain").loss.back();
    struct Case {
        nlohmann::json gradients;
        double bytes_per_value;  // the formula: codes plus one f32 scale per 256-value block
    };
    const Case cases[] = {
        {{{"type", "int8"}}, 1.0 + 4.0 / 256},
        {{{"type", "fp8_e4m3"}}, 1.0 + 4.0 / 256},
        {{{"type", "int4"}}, 0.5 + 4.0 / 256},
        {{{"type", "bf16"}}, 2.0},
    };
    for (const Case& c : cases) {
        const std::string name = c.gradients["type"].get<std::string>();
        train_ok(with(config(40, 2, 0), c.gradients), name, 2);
        const double got = read_run(name).loss.back();
        std::printf("[ codec ] %s: final loss %.5f against %.5f (%.2f%%)\n", name.c_str(), got, ref,
                    100 * (got / ref - 1));
        EXPECT_LE(std::fabs(got / ref - 1), 0.02) << name;
        const nlohmann::json g = step_lines(name).back()["compression"]["gradients"];
        // Per rank: 4 bytes a value raw; the buckets' segments add at most a scale and 3 bytes
        // of padding each.
        const double ratio = g["ratio"].get<double>();
        EXPECT_LE(ratio, 4.0 / c.bytes_per_value * 1.0001) << name;
        EXPECT_GE(ratio, 4.0 / c.bytes_per_value * 0.97) << name;
        const double err = g["relative_error"].get<double>();
        EXPECT_GT(err, 0) << name;
        EXPECT_LT(err, name == "int4" ? 0.3 : 0.05) << name;
    }
    // onebit: one sign bit a value and an f32 scale per 256; with Adam it trails the others
    // (docs/compression.md, "Recommended settings"; its convergence is checked in
    // compression_convergence_cli_test.cpp), so only its bytes and error are checked here.
    train_ok(with(config(4, 2, 0), {{"type", "onebit"}}), "onebit", 2);
    const nlohmann::json g = step_lines("onebit").back()["compression"]["gradients"];
    EXPECT_LE(g["ratio"].get<double>(), 4.0 / (1.0 / 8 + 4.0 / 256) * 1.0001);
    EXPECT_GE(g["ratio"].get<double>(), 4.0 / (1.0 / 8 + 4.0 / 256) * 0.95);
    EXPECT_TRUE(g["error_feedback"].get<bool>());
    EXPECT_LT(g["relative_error"].get<double>(), 1.0);
}

TEST_F(GradCompressionCli, ThreadsAndMpiDecodeTheSameBits) {
    const nlohmann::json j = with(config(4, 2, 2), {{"type", "int4"}, {"error_feedback", true}});
    expect_threads_equal_mpirun(j, 4);
}

TEST_F(GradCompressionCli, OverlappedAllReducesFinishInTheSameOrderEverywhere) {
    // Stage 0 with overlap_comm: each bucket's all-reduce is a reduce-scatter issued during the
    // backward and an all-gather issued when it finishes. Finishing when a handle happens to be
    // complete would issue the all-gathers in a timing-dependent order across ranks; they are
    // issued at fixed points (Note [Finish order]), so mpirun runs, and gives the bits of the
    // threads and of the same run without overlap.
    nlohmann::json j = with(config(3, 2, 0), {{"type", "int8"}, {"error_feedback", true}});
    train_ok(j, "serial", 2);
    j["zero_optimization"]["overlap_comm"] = true;
    train_ok(j, "threads", 2);
    const CommandResult r = mpirun_train(j, "mpi");
    ASSERT_EQ(r.code, 0) << r.output;
    const RunLog a = read_run("threads"), b = read_run("mpi"), c = read_run("serial");
    ASSERT_EQ(a.loss.size(), 3u);
    EXPECT_EQ(a.loss, b.loss);
    EXPECT_EQ(a.weights, b.weights);
    EXPECT_EQ(a.weights, c.weights);
}

TEST_F(GradCompressionCli, BesideShardedEmbeddings) {
    nlohmann::json j = zt::testing::compression_dlrm(4, 16);
    train_ok(j, "plain", 2);
    train_ok(with(j, {{"type", "f32"}}), "f32", 2);
    EXPECT_EQ(read_run("f32").loss, read_run("plain").loss);
    train_ok(with(j, {{"type", "int8"}}), "int8", 2);
    const RunLog q = read_run("int8");
    ASSERT_EQ(q.loss.size(), 4u);
    for (double l : q.loss) EXPECT_TRUE(std::isfinite(l));
    EXPECT_LE(std::fabs(q.loss.back() / read_run("plain").loss.back() - 1), 0.02);
}

TEST_F(GradCompressionCli, WhatCannotComposeIsRefusedBeforeTheFirstStep) {
    struct Bad {
        nlohmann::json gradients;
        std::string extra;  // a top-level key to set, as JSON
        std::string says;
    };
    const Bad bad[] = {
        {{{"type", "int3"}}, "", "compression.gradients.type"},
        {{{"type", "topk"}, {"block", 64}}, "", "only the blockwise types"},
        {{{"type", "int8"}, {"ratio", 0.1}}, "", "only \"topk\" keeps a ratio"},
        {{{"type", "topk"}, {"ratio", 0}}, "", "compression.gradients.ratio"},
        {{{"type", "int8"}, {"block", 0}}, "", "compression.gradients.block"},
        {{{"type", "topk"}, {"start_step", -1}},
         "",
         "compression.gradients.start_step: expected an integer >= 0"},
        {{{"type", "int8"}}, "bf16", "communication_data_type"},
    };
    int i = 0;
    for (const Bad& b : bad) {
        const std::string run = "bad" + std::to_string(i++);
        nlohmann::json j = with(config(2, 2, 0), b.gradients);
        if (b.extra == "bf16") {
            j["bf16"] = {{"enabled", true}};
            j["communication_data_type"] = "bf16";
            j["data_types"] = {{"grad_accum_dtype", "fp32"}};
        }
        const CommandResult r = train_run(j, run, "", 2);
        EXPECT_EQ(r.code, 2) << b.says << ": " << r.output;
        EXPECT_NE(r.output.find(b.says), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(dir_ / run / "metrics.jsonl")) << b.says;
    }
    // A key the section does not know is named (as every config key is), not acted on.
    const CommandResult typo =
        train_run(with(config(1, 2, 0), {{"type", "int8"}, {"bits", 3}}), "typo", "", 2);
    EXPECT_EQ(typo.code, 0) << typo.output;
    EXPECT_NE(typo.output.find("compression.gradients.bits: unknown key"), std::string::npos)
        << typo.output;
    // One rank: nothing to compress, said once.
    const CommandResult one = train_run(with(config(1, 1, 0), {{"type", "int8"}}), "one", "", 1);
    EXPECT_EQ(one.code, 0) << one.output;
    EXPECT_NE(one.output.find("one data-parallel rank reduces no gradients"), std::string::npos)
        << one.output;
}

TEST_F(GradCompressionCli, ZeroPlusPlusQuantizedWeightsAndGradients) {
    // DeepSpeed's keys: zero_quantized_weights (stage 3's gathers in blockwise int8) and
    // zero_quantized_gradients (the reductions in blockwise int4).
    train_ok(config(40, 2, 3), "plain", 2);
    nlohmann::json j = config(40, 2, 3);
    j["zero_optimization"]["zero_quantized_weights"] = true;
    j["zero_optimization"]["zero_quantized_gradients"] = true;
    train_ok(j, "zpp", 2);
    const double ref = read_run("plain").loss.back(), got = read_run("zpp").loss.back();
    std::printf("[ zero++ ] final loss %.5f against %.5f\n", got, ref);
    EXPECT_LE(std::fabs(got / ref - 1), 0.02);
    const nlohmann::json a = step_lines("plain").back()["comm"],
                         b = step_lines("zpp").back()["comm"];
    // Every gather in int8 with an f32 scale per 256: about a quarter of the f32 bytes.
    const double gathers =
        b["all_gather"]["bytes"].get<double>() / a["all_gather"]["bytes"].get<double>();
    EXPECT_GT(gathers, 0.25);
    EXPECT_LT(gathers, 0.30);
    EXPECT_EQ(step_lines("zpp").back()["compression"]["gradients"]["codec"], "int4");

    j["zero_optimization"]["stage"] = 1;
    const CommandResult bad = train_run(j, "bad", "", 2);
    EXPECT_EQ(bad.code, 2) << bad.output;
    EXPECT_NE(bad.output.find("zero_quantized_weights: quantizes stage 3"), std::string::npos)
        << bad.output;
    j["zero_optimization"]["stage"] = 3;
    j["compression"]["gradients"] = {{"type", "int8"}};
    const CommandResult both = train_run(j, "both", "", 2);
    EXPECT_EQ(both.code, 2) << both.output;
    EXPECT_NE(both.output.find("keep one"), std::string::npos) << both.output;
}

TEST_F(GradCompressionCli, ErrorFeedbackResidualsResumeBitForBit) {
    // int4 with error feedback at stage 2 (residuals per bucket and per owned segment): stopped
    // at step 3 and resumed, the run continues exactly as the uninterrupted one; resumed on 4
    // ranks (another layout) the residuals restart at zero, and the run says so.
    auto cfg = [&](int steps, int dp) {
        nlohmann::json j = with(config(steps, dp, 2), {{"type", "int4"}});
        j["checkpoint"] = {{"interval_steps", 3}};
        return j;
    };
    train_ok(cfg(6, 2), "full", 2);
    train_ok(cfg(3, 2), "resumed", 2);
    const CommandResult r = train_run(cfg(6, 2), "resumed", "--resume", 2);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.output.find("restart at zero"), std::string::npos) << r.output;
    const RunLog full = read_run("full"), resumed = read_run("resumed");
    ASSERT_EQ(full.loss.size(), 6u);
    EXPECT_EQ(resumed.loss, full.loss);
    EXPECT_EQ(resumed.weights, full.weights);
    EXPECT_TRUE(fs::exists(dir_ / "full" / "checkpoints" / "step_00000003" /
                           "comm_state_00001.safetensors"));

    train_ok(cfg(3, 2), "other", 2);
    const CommandResult o = train_run(cfg(6, 4), "other", "--resume", 4);
    ASSERT_EQ(o.code, 0) << o.output;
    EXPECT_NE(o.output.find("restart at zero: they were written for another layout"),
              std::string::npos)
        << o.output;
}

TEST_F(GradCompressionCli, StartStepWarmsUpUncompressedAndResumesBitForBit) {
    // start_step 3 (Note [Uncompressed warm-up]): steps 1-3 reduce through the plain collectives,
    // so losses 1-4 are the uncompressed run's bits; the codec takes over at step 4 (its
    // residuals from zero). Stopped in the warm-up (step 2, no residuals yet) or after it (step
    // 5) and resumed, the run continues exactly as the uninterrupted one. Top-k at stage 2
    // (reduce-scatter, per-bucket residuals) and PowerSGD at stage 0 (all-reduce, Q and
    // residuals).
    const nlohmann::json codecs[] = {{{"type", "topk"}, {"ratio", 0.05}},
                                     {{"type", "powersgd"}, {"rank", 1}}};
    for (const nlohmann::json& codec : codecs) {
        const std::string name = codec["type"].get<std::string>();
        const int stage = name == "topk" ? 2 : 0;
        nlohmann::json gradients = codec;
        gradients["start_step"] = 3;
        auto cfg = [&](int steps, int interval) {
            nlohmann::json j = with(config(steps, 2, stage), gradients);
            j["checkpoint"] = {{"interval_steps", interval}};
            return j;
        };
        train_ok(config(7, 2, stage), name + "_plain", 2);
        train_ok(cfg(7, 2), name + "_full", 2);
        const RunLog plain = read_run(name + "_plain"), full = read_run(name + "_full");
        ASSERT_EQ(full.loss.size(), 7u) << name;
        for (size_t i = 0; i < 4; ++i) EXPECT_EQ(full.loss[i], plain.loss[i]) << name << " " << i;
        EXPECT_NE(full.loss[4], plain.loss[4]) << name << ": step 4 was not compressed";
        const std::vector<nlohmann::json> lines = step_lines(name + "_full");
        for (size_t i = 0; i < lines.size(); ++i) {
            const nlohmann::json& g = lines[i]["compression"]["gradients"];
            EXPECT_EQ(g["phase"], i < 3 ? "warmup" : "compressed") << name << " " << i;
            if (i < 3)
                EXPECT_EQ(g["wire_bytes"], 0) << name << " " << i;
            else
                EXPECT_GT(g["wire_bytes"].get<int64_t>(), 0) << name << " " << i;
        }
        for (const int stop : {2, 5}) {
            const std::string run = name + "_resumed" + std::to_string(stop);
            train_ok(cfg(stop, stop), run, 2);
            const CommandResult r = train_run(cfg(7, stop), run, "--resume", 2);
            ASSERT_EQ(r.code, 0) << r.output;
            EXPECT_EQ(r.output.find("restart at zero"), std::string::npos) << r.output;
            const RunLog resumed = read_run(run);
            EXPECT_EQ(resumed.loss, full.loss) << run;
            EXPECT_EQ(resumed.weights, full.weights) << run;
        }
    }
}
