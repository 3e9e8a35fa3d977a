// Quantization-aware training as a user runs it (docs/quantization.md): "compression":
// {"quantization": {...}} marks every metrics line with whether it trained quantized, evaluates
// the quantized model beside the full-precision one once it is on, trains on 2 ranks like one
// process, and refuses what does not quantize before any work.
#include <gtest/gtest.h>

#include <fstream>
#include <tuple>

#include "checkpoint/safetensors.h"
#include "cli/cli_fixture.h"
#include "reader_required.h"
#include "tensor/kernels/fake_quant.h"
#include "util/error.h"

using zt::testing::Cli;
using zt::testing::CommandResult;
namespace fs = std::filesystem;

namespace {

class QuantizationCli : public Cli {
  protected:
    nlohmann::json config(int steps, int ranks) {
        nlohmann::json j = tiny();
        j["steps"] = steps;
        j["train_batch_size"] = 8;
        j["train_micro_batch_size_per_gpu"] = 8 / ranks;
        j["data"]["builtin_tokens"] = 1 << 14;
        j["eval_interval"] = 2;
        j["compression"]["quantization"] = {
            {"weights", "int8"}, {"activations", "fp8_e4m3"}, {"start_step", 3}};
        return j;
    }
    std::vector<nlohmann::json> lines(const std::string& run) {
        std::vector<nlohmann::json> out;
        std::ifstream f(dir_ / run / "metrics.jsonl");
        std::string line;
        while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line));
        return out;
    }
};

}  // namespace

TEST_F(QuantizationCli, MetricsSayWhenAndEvaluationComparesWithFullPrecision) {
    ASSERT_EQ(train_run(config(6, 1), "one", "", 1).code, 0);
    int evals = 0;
    for (const nlohmann::json& j : lines("one")) {
        const int64_t step = j["step"];
        if (j.contains("loss")) {
            ASSERT_TRUE(j.contains("quantization")) << j.dump();
            EXPECT_EQ(j["quantization"]["active"].get<bool>(), step >= 3) << j.dump();
            EXPECT_EQ(j["quantization"]["weights"], "int8");
            EXPECT_EQ(j["quantization"]["activations"], "fp8_e4m3");
            // The weight error: 0 < error < one int8 step's worth, once quantized; per layer on
            // the first quantized step.
            if (step >= 3) {
                const double e = j["quantization"]["weight_error"];
                EXPECT_GT(e, 0.0) << j.dump();
                EXPECT_LT(e, 0.02) << j.dump();  // seen about 0.005 (int8, per-row scales)
                EXPECT_EQ(j["quantization"].contains("layers"), step == 3) << j.dump();
                if (step == 3) {
                    EXPECT_EQ(j["quantization"]["layers"].size(), 4u) << j.dump();
                }
            } else {
                EXPECT_FALSE(j["quantization"].contains("weight_error")) << j.dump();
            }
        }
        if (j.contains("eval_loss")) {
            ++evals;
            // Step 2's evaluation is of the model step 3 trains: quantized.
            EXPECT_TRUE(j.contains("eval_loss_full_precision")) << j.dump();
            EXPECT_NE(j["eval_loss"], j["eval_loss_full_precision"]) << j.dump();
        }
    }
    EXPECT_EQ(evals, 3);
    // Before the start, no full-precision twin: the model is full precision.
    nlohmann::json late = config(2, 1);
    late["compression"]["quantization"]["start_step"] = 10;
    ASSERT_EQ(train_run(late, "late", "", 1).code, 0);
    for (const nlohmann::json& j : lines("late")) {
        if (j.contains("eval_loss")) {
            EXPECT_FALSE(j.contains("eval_loss_full_precision")) << j.dump();
        }
    }
}

TEST_F(QuantizationCli, TwoRanksTrainLikeOneProcess) {
    ASSERT_EQ(train_run(config(5, 1), "one", "", 1).code, 0);
    nlohmann::json two = config(5, 2);
    two["zero_optimization"] = {{"stage", 3}};
    ASSERT_EQ(train_run(two, "two", "", 2).code, 0);
    expect_close(read_run("two"), read_run("one"), "dp2 ZeRO-3 against one process");
}

// Tensor parallelism (a row-parallel Linear's rows scaled by their maximum over every part) and
// pipeline stages train like one process, and report the whole model's weight error.
TEST_F(QuantizationCli, TensorAndPipelineParallelTrainLikeOneProcess) {
    auto layout = [&](int stages, int tp) {
        nlohmann::json j = config(5, 1);
        j["train_micro_batch_size_per_gpu"] = 2;
        j["model"]["n_layers"] = 2;
        j["model"]["n_heads"] = 4;
        j["parallel"]["pipeline"] = {{"stages", stages}, {"micro_batches", 4}};
        if (tp > 1) j["parallel"]["tensor"] = tp;
        return j;
    };
    ASSERT_EQ(train_run(layout(1, 1), "one", "", 1).code, 0);
    const RunLog ref = read_run("one");
    const std::vector<nlohmann::json> ref_steps = step_lines("one");
    for (const auto& [name, stages, tp] :
         {std::tuple{"tp2", 1, 2}, std::tuple{"pp2", 2, 1}, std::tuple{"tp2_pp2", 2, 2}}) {
        const CommandResult r = train_run(layout(stages, tp), name, "", stages * tp);
        ASSERT_EQ(r.code, 0) << name << r.output;
        expect_close(read_run(name), ref, name);
        const std::vector<nlohmann::json> steps = step_lines(name);
        ASSERT_EQ(steps.size(), ref_steps.size()) << name;
        for (size_t i = 2; i < steps.size(); ++i) {  // quantized from step 3
            const double e = steps[i]["quantization"]["weight_error"];
            const double want = ref_steps[i]["quantization"]["weight_error"];
            EXPECT_NEAR(e, want, 1e-3 * want) << name << " step " << i + 1;
        }
        EXPECT_EQ(steps[2]["quantization"]["layers"].size(), 8u) << name;  // every Linear
    }
}

TEST_F(QuantizationCli, WhatDoesNotQuantizeIsRefusedBeforeAnyWork) {
    struct Case {
        nlohmann::json q;
        int tp;
        const char* says;
    };
    const std::vector<Case> cases = {
        {{{"weights", "int4"}}, 1, "compression.quantization.weights: expected one of"},
        {{{"weights", "none"}, {"activations", "none"}}, 1, "neither weights nor activations"},
        {{{"clip", 0}}, 1, "expected a number in (0, 1]"},
        {{{"params", {"nothing"}}}, 1, "no Linear weight's name contains any of \"nothing\""},
    };
    for (const Case& c : cases) {
        nlohmann::json j = config(3, 1);
        j["compression"]["quantization"] = c.q;
        const CommandResult r = train_run(j, "bad", "", c.tp);
        EXPECT_EQ(r.code, 2) << c.q.dump() << r.output;
        EXPECT_NE(r.output.find(c.says), std::string::npos) << c.q.dump() << r.output;
        EXPECT_FALSE(fs::exists(dir_ / "bad" / "model.safetensors"));
    }
}

// export --quantize writes each Linear weight as codes and a scale per row whose product is the
// fake-quantized f32 weight, bit for bit; the other tensors as the plain export has them.
TEST_F(QuantizationCli, ExportWritesCodesAndScalesOfTheFakeQuantizedWeights) {
    nlohmann::json j = config(3, 1);
    ASSERT_EQ(train_run(j, "run", "", 1).code, 0);
    const std::string cfg = write_config(j, "export.json");
    const std::string plain = (dir_ / "plain.safetensors").string();
    ASSERT_EQ(zt::testing::run_zerotrain("export " + cfg + " --from " + (dir_ / "run").string() +
                                         " --out " + plain)
                  .code,
              0);
    const zt::SafetensorsFile ref(plain);
    for (const char* fmt : {"int8", "fp8_e4m3", "fp8_e5m2"}) {
        const std::string out = (dir_ / (std::string(fmt) + ".safetensors")).string();
        const CommandResult r =
            zt::testing::run_zerotrain("export " + cfg + " --from " + (dir_ / "run").string() +
                                       " --out " + out + " --quantize " + fmt);
        ASSERT_EQ(r.code, 0) << r.output;
        const zt::SafetensorsFile q(out);
        const zt::QuantFormat f = zt::parse_quant_format(fmt);
        int quantized = 0;
        for (const zt::SafetensorsTensor& t : ref.tensors()) {
            std::vector<float> w(static_cast<size_t>(t.numel));
            ref.read_f32(t.name, w.data(), t.numel);
            const zt::SafetensorsTensor& qt = q.tensor(t.name);
            const bool linear = t.shape.size() == 2 && t.name.find(".h.") != std::string::npos;
            if (!linear) {
                std::vector<float> v(w.size());
                q.read_f32(t.name, v.data(), t.numel);
                EXPECT_EQ(v, w) << t.name;
                continue;
            }
            ++quantized;
            EXPECT_EQ(qt.dtype, std::string(fmt) == "int8"       ? "I8"
                                : std::string(fmt) == "fp8_e4m3" ? "F8_E4M3"
                                                                 : "F8_E5M2");
            const int64_t rows = t.shape[0], cols = t.shape[1];
            std::vector<float> fake(w.size()), s(static_cast<size_t>(rows)), got_s(s.size());
            zt::kernels::fake_quant_rows(w.data(), fake.data(), s.data(), rows, cols, f, 1.0f);
            q.read_f32(t.name + "_scale", got_s.data(), rows);
            EXPECT_EQ(got_s, s) << t.name;
            const auto codes = q.data(t.name);
            for (int64_t i = 0; i < t.numel; ++i) {
                const float v = zt::quant_decode(static_cast<uint8_t>(codes[i]), f) *
                                got_s[static_cast<size_t>(i / cols)];
                ASSERT_EQ(v, fake[static_cast<size_t>(i)]) << t.name << " " << i;
            }
        }
        EXPECT_EQ(quantized, 4) << fmt;  // c_attn, attn c_proj, c_fc, mlp c_proj of 1 layer
        EXPECT_NE(q.metadata().at("quantization").find(fmt), std::string::npos);
    }
}

// The safetensors reader (Debian's python3-safetensors, numpy) reads the int8 export: int8 codes
// and f32 scales with the shapes and values zerotrain wrote.
TEST_F(QuantizationCli, SafetensorsReadsTheInt8Export) {
    nlohmann::json j = config(2, 1);
    ASSERT_EQ(train_run(j, "run", "", 1).code, 0);
    const std::string out = (dir_ / "int8.safetensors").string();
    ASSERT_EQ(
        zt::testing::run_zerotrain("export " + write_config(j, "e.json") + " --from " +
                                   (dir_ / "run").string() + " --out " + out + " --quantize int8")
            .code,
        0);
    const std::string name = "transformer.h.0.mlp.c_fc.weight";
    const CommandResult r = zt::testing::run_command(
        "/usr/bin/python3 -c \"import sys\ntry:\n from safetensors.numpy import load_file\n"
        "except ImportError:\n sys.exit(77)\nd = load_file(sys.argv[1])\nw = d[sys.argv[2]]\n"
        "s = d[sys.argv[2] + '_scale']\nprint(w.dtype, list(w.shape), s.dtype, list(s.shape), "
        "int(w.astype('int64').sum()), repr(float(s.astype('float64').sum())))\" " +
        out + " " + name);
    if (r.code == 77 || r.code == 127) ZT_READER_MISSING("python3-safetensors: " << r.output);
    ASSERT_EQ(r.code, 0) << r.output;
    const zt::SafetensorsFile q(out);
    const zt::SafetensorsTensor& t = q.tensor(name);
    const auto codes = q.data(name);
    int64_t sum = 0;
    for (std::byte b : codes) sum += static_cast<int8_t>(b);
    std::vector<float> scale(static_cast<size_t>(t.shape[0]));
    q.read_f32(name + "_scale", scale.data(), t.shape[0]);
    double ssum = 0;
    for (float x : scale) ssum += x;
    const std::string want = zt::str_cat("int8 [", t.shape[0], ", ", t.shape[1], "] float32 [",
                                         t.shape[0], "] ", sum, " ");
    EXPECT_EQ(r.output.substr(0, want.size()), want) << r.output;
    EXPECT_NEAR(std::stod(r.output.substr(want.size())), ssum, 1e-9 * std::abs(ssum));
}
