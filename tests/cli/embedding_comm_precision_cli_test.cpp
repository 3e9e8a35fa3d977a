// embedding.comm_precision (docs/compression.md): the sharded tables' row (forward) and gradient
// (backward) all-to-alls travel as a codec's bytes. fp32 is today's run bit for bit; the
// recommended setting (fp16 forward, bf16 backward) trains DLRM on synthetic data within 2% of
// the uncompressed final loss, with bytes and error in the metrics that match the codecs'
// formulas; threads and mpirun decode the same bits; bad values exit 2 naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "cli_fixture.h"
#include "util/error.h"

namespace zt::testing {
namespace {

// An odd embedding dim (5): every segment of rows is an odd count of values, so the 2-byte
// casts pad; row and table sharding over 2 ranks, one table replicated (no exchange).
nlohmann::json dlrm_config(int steps) {
    return {{"train_micro_batch_size_per_gpu", 32},
            {"steps", steps},
            {"steps_per_print", 1},
            {"optimizer", {{"type", "SGD"}, {"params", {{"lr", 0.1}}}}},
            {"model",
             {{"type", "dlrm"},
              {"table_rows", {3001, 700, 40, 1501}},
              {"embedding_dim", 5},
              {"bottom_mlp", {16, 5}},
              {"top_mlp", {16}}}},
            {"embedding",
             {{"sharding", {"row", "table", "data_parallel", "row"}},
              {"optimizer", {{"type", "rowwise_adagrad"}, {"lr", 0.05}}}}},
            {"data", {{"type", "synthetic"}, {"records", 4000}, {"eval_records", 64}}},
            {"eval_interval", 0},
            {"threads", 1}};
}

nlohmann::json with(nlohmann::json j, const nlohmann::json& precision) {
    j["embedding"]["comm_precision"] = precision;
    return j;
}

class EmbeddingCommCli : public Cli {
  protected:
    void train_ok(const nlohmann::json& j, const std::string& run, int ranks = 2) {
        const CommandResult r = train_run(j, run, "", ranks);
        ASSERT_EQ(r.code, 0) << run << ": " << r.output;
    }
    // The "comm_compression" entries of a run's step lines.
    std::vector<nlohmann::json> comm(const std::string& run) {
        std::vector<nlohmann::json> out;
        std::ifstream f(dir_ / run / "metrics.jsonl");
        for (std::string line; std::getline(f, line);) {
            const auto j = nlohmann::json::parse(line);
            if (j.contains("loss") && j.contains("embedding"))
                out.push_back(j["embedding"].value("comm_compression", nlohmann::json()));
        }
        return out;
    }
    // The mean loss of the last k steps (one step's loss of 64 samples is noisy).
    double final_loss(const std::string& run, size_t k = 5) {
        const RunLog r = read_run(run);
        double s = 0;
        for (size_t i = r.loss.size() - k; i < r.loss.size(); ++i) s += r.loss[i];
        return s / static_cast<double>(k);
    }
};

TEST_F(EmbeddingCommCli, Fp32IsThePlainRunBitForBit) {
    train_ok(dlrm_config(4), "plain");
    train_ok(with(dlrm_config(4), "fp32"), "fp32");
    train_ok(with(dlrm_config(4), {{"forward", "fp32"}, {"backward", "fp32"}}), "fp32_obj");
    const RunLog plain = read_run("plain");
    ASSERT_EQ(plain.loss.size(), 4u);
    ASSERT_FALSE(plain.weights.empty());
    for (const std::string run : {"fp32", "fp32_obj"}) {
        EXPECT_EQ(read_run(run).loss, plain.loss) << run;
        EXPECT_EQ(read_run(run).weights, plain.weights) << run;
        EXPECT_TRUE(comm(run).back().is_null()) << run;  // no compression entry
    }
    // A lossy codec changes the bits (the codec is really applied), in either direction alone.
    train_ok(with(dlrm_config(4), {{"forward", "int8"}}), "fwd_int8");
    train_ok(with(dlrm_config(4), {{"backward", "int8"}}), "bwd_int8");
    EXPECT_NE(read_run("fwd_int8").weights, plain.weights);
    EXPECT_NE(read_run("bwd_int8").weights, plain.weights);
    EXPECT_EQ(comm("fwd_int8").back()["backward"], "f32");
}

TEST_F(EmbeddingCommCli, RecommendedSettingConvergesWithinTwoPercent) {
    constexpr int kSteps = 40;
    train_ok(dlrm_config(kSteps), "plain");
    const double ref = final_loss("plain");
    struct Case {
        nlohmann::json precision;
        double max_ratio, min_ratio;  // raw / wire bytes: 4 / (bytes per value), padding below
        double max_rel_error;         // unit roundoff of the coarser codec (fp8: 3 bits, 2^-4)
    };
    const Case cases[] = {
        {{{"forward", "fp16"}, {"backward", "bf16"}}, 2.0, 1.8, std::ldexp(1.0, -8)},
        {"bf16", 2.0, 1.8, std::ldexp(1.0, -8)},
        {{{"forward_precision", "int8"}, {"backward_precision", "fp8"}},
         4.0,
         2.0,
         std::ldexp(1.0, -4)},
    };
    int k = 0;
    for (const Case& c : cases) {
        const std::string name = "case" + std::to_string(k++);
        train_ok(with(dlrm_config(kSteps), c.precision), name);
        const double got = final_loss(name);
        std::printf("[ emb comm ] %s: final loss %.5f against %.5f (%+.2f%%)\n",
                    c.precision.dump().c_str(), got, ref, 100 * (got / ref - 1));
        EXPECT_LE(std::fabs(got / ref - 1), 0.02) << c.precision.dump();
        const nlohmann::json m = comm(name).back();
        ASSERT_TRUE(m.is_object()) << name;
        EXPECT_GT(m["wire_bytes"].get<int64_t>(), 0);
        EXPECT_LE(m["ratio"].get<double>(), c.max_ratio) << name;
        EXPECT_GE(m["ratio"].get<double>(), c.min_ratio) << name;
        EXPECT_LE(m["relative_error"].get<double>(), c.max_rel_error) << name;
        EXPECT_GT(m["relative_error"].get<double>(), 0.0) << name;
    }
}

TEST_F(EmbeddingCommCli, ThreadsAndMpiDecodeTheSameBits) {
    const nlohmann::json j = with(dlrm_config(4), {{"forward", "int8"}, {"backward", "fp8"}});
    expect_threads_equal_mpirun(j, 4);
}

TEST_F(EmbeddingCommCli, ThreeAndFourRanksTrainWithTheCodecsBytes) {
    // Uneven row shards (3001 rows over 3 ranks) and a table on one rank of four; the exchange's
    // bytes follow the codec (int8: 1 byte a value plus a 4-byte scale per started block of 256,
    // padded to 4 bytes, per segment; a segment holds one or more 5-value rows, so the ratio is
    // between 20 / 12 (a lone row) and 4).
    for (int ranks : {3, 4}) {
        const std::string run = "r" + std::to_string(ranks);
        train_ok(with(dlrm_config(3), "int8"), run, ranks);
        const RunLog r = read_run(run);
        ASSERT_EQ(r.loss.size(), 3u) << run;
        for (double l : r.loss) EXPECT_TRUE(std::isfinite(l)) << run;
        const nlohmann::json m = comm(run).back();
        ASSERT_TRUE(m.is_object()) << run;
        EXPECT_GE(m["ratio"].get<double>(), 20.0 / 12) << run;
        EXPECT_LE(m["ratio"].get<double>(), 4.0) << run;
        train_ok(dlrm_config(3), run + "_plain", ranks);
        EXPECT_LE(std::fabs(r.loss.back() / read_run(run + "_plain").loss.back() - 1), 0.02) << run;
    }
}

TEST_F(EmbeddingCommCli, BadValuesAreRefusedBeforeTheFirstStep) {
    struct Bad {
        nlohmann::json precision;
        std::string says;
    };
    const Bad bad[] = {
        {"int3", "embedding.comm_precision"},
        {{{"forward", "topk"}}, "embedding.comm_precision.forward"},
        {{{"backward_precision", "onebit"}}, "embedding.comm_precision.backward_precision"},
        {{{"forward", "fp16"}, {"forward_precision", "bf16"}}, "name the same setting"},
        {7, "embedding.comm_precision"},
    };
    int k = 0;
    for (const Bad& b : bad) {
        const std::string run = "bad" + std::to_string(k++);
        const CommandResult r = train_run(with(dlrm_config(2), b.precision), run, "", 2);
        EXPECT_EQ(r.code, 2) << b.says << ": " << r.output;
        EXPECT_NE(r.output.find(b.says), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(dir_ / run / "metrics.jsonl")) << b.says;
    }
    // Dynamic (hash-keyed) tables exchange fp32 rows only.
    nlohmann::json dyn = with(dlrm_config(2), "fp16");
    dyn["model"].erase("table_rows");
    dyn["model"]["tables"] = {{{"rows", 3001}, {"dim", 5}},
                              {{"dynamic", true}, {"dim", 5}, {"min_count", 1}}};
    dyn["embedding"].erase("sharding");
    {
        const Bad b{"", "dynamic (hash-keyed) tables exchange their rows in fp32 only"};
        const std::string run = "dyn";
        const CommandResult r = train_run(dyn, run, "", 2);
        EXPECT_EQ(r.code, 2) << b.says << ": " << r.output;
        EXPECT_NE(r.output.find(b.says), std::string::npos) << r.output;
        EXPECT_FALSE(fs::exists(dir_ / run / "metrics.jsonl")) << b.says;
    }
}

}  // namespace
}  // namespace zt::testing
