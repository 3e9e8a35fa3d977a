// DLRM training: the equivalence rule (N data-parallel ranks at every ZeRO stage train like one
// process with N times the accumulation, on the same samples), learnability (one pass over a
// synthetic click log ends near the hidden teacher's AUC), and the whole run through
// run_training with evaluation metrics.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "click_steps.h"
#include "comm/local/local_comm.h"
#include "data/click/click_dataset.h"
#include "data/click/synth_ctr.h"
#include "data/tokens/token_dataset.h"
#include "models/dlrm/dlrm.h"
#include "optim/sgd.h"
#include "runtime/config.h"
#include "runtime/engine.h"
#include "runtime/trainer.h"
#include "tensor/threads.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

class DlrmTrain : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("zt_dlrm_train_" + std::string(::testing::UnitTest::GetInstance()
                                                    ->current_test_info()
                                                    ->name()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    fs::path dir_;
};

const std::vector<int64_t> kRows = {500, 300, 200, 100, 50};

DlrmOptions model_options() {
    DlrmOptions o;
    o.dense_features = 13;
    for (int64_t r : kRows) o.tables.push_back({r, 8, ops::BagPooling::kSum});
    o.bottom_mlp = {16, 8};
    o.top_mlp = {16, 1};
    return o;
}

struct Trajectory {
    std::vector<double> loss, grad_norm;
    std::vector<float> weights;
};

constexpr int64_t kMicro = 8, kSteps = 12;

void train_rank(const ClickDataset& ds, int ranks, int64_t accum, int stage, Communicator* comm,
                Trajectory* out) {
    set_num_threads(1);
    const int rank = comm ? comm->rank() : 0;
    MemoryPool pool;
    EngineOptions eo;
    eo.grad_accum = accum;
    eo.lr = 0.3;
    eo.seed = 5;
    eo.optimizer = std::make_unique<Sgd>(SgdOptions{});
    eo.comm = comm;
    eo.zero.stage = stage;
    eo.zero.reduce_bucket_size = 300;
    eo.zero.allgather_bucket_size = 400;
    eo.zero.prefetch_bucket_size = 800;
    eo.zero.persistence_threshold = 50;
    Engine e(pool, std::make_unique<Dlrm>(model_options()), std::move(eo));
    ClickBatchBuffers buf;
    for (int64_t step = 0; step < kSteps; ++step) {
        const StepStats st = click_step(e, ds, buf, step, accum, kMicro, rank, ranks);
        if (rank == 0) {
            out->loss.push_back(st.loss);
            out->grad_norm.push_back(st.grad_norm);
        }
    }
    std::vector<float> w = e.gather_master();
    if (rank == 0) out->weights = std::move(w);
}

TEST_F(DlrmTrain, DataParallelAtEveryStageTrainsLikeOneProcess) {
    // Equivalence rule, SGD without clipping: the loss, the gradient norm and the final weights.
    // One process accumulates micro-batch gradients in micro-step order; N ranks reduce the
    // same per-micro-batch gradients in rank order: the same additions in the same order for
    // N = 2, so the runs agree to rounding of the 1/N scaling (tolerance 1e-5 relative; the
    // largest difference is printed).
    const std::string path = (dir_ / "d.ctr").string();
    SynthCtrOptions so;
    so.records = 2000;
    so.seed = 7;
    so.table_rows = kRows;
    so.hotness = 2;
    write_synth_ctr(so, path);
    ClickDatasetOptions dopt;
    dopt.seed = 3;
    const ClickDataset ds(CtrFile::open(path), dopt);
    Trajectory ref;
    train_rank(ds, 1, 4, 0, nullptr, &ref);
    ASSERT_EQ(ref.loss.size(), static_cast<size_t>(kSteps));
    EXPECT_LT(ref.loss.back(), ref.loss.front());
    for (int ranks : {2, 4}) {
        for (int stage = 0; stage <= 3; ++stage) {
            Trajectory t;
            run_local_ranks(ranks, [&](Communicator& c) {
                train_rank(ds, ranks, 4 / ranks, stage, &c, &t);
            });
            ASSERT_EQ(t.loss.size(), ref.loss.size());
            double worst = 0;
            for (size_t i = 0; i < ref.loss.size(); ++i) {
                const double dl = std::abs(t.loss[i] - ref.loss[i]) / std::abs(ref.loss[i]);
                const double dg =
                    std::abs(t.grad_norm[i] - ref.grad_norm[i]) / std::abs(ref.grad_norm[i]);
                worst = std::max({worst, dl, dg});
                EXPECT_LT(dl, 1e-5) << ranks << " ranks, stage " << stage << ", step " << i;
                EXPECT_LT(dg, 1e-5) << ranks << " ranks, stage " << stage << ", step " << i;
            }
            // The arena is padded to a multiple of the rank count; the padding holds zeros.
            ASSERT_GE(t.weights.size(), ref.weights.size());
            for (size_t i = ref.weights.size(); i < t.weights.size(); ++i)
                ASSERT_EQ(t.weights[i], 0.0f);
            for (size_t i = 0; i < ref.weights.size(); ++i) {
                ASSERT_NEAR(t.weights[i], ref.weights[i], 1e-5 + 1e-5 * std::abs(ref.weights[i]))
                    << ranks << " ranks, stage " << stage << ", weight " << i;
            }
            std::printf("%d ranks, stage %d: largest relative difference %.3g\n", ranks, stage,
                        worst);
        }
    }
}

std::vector<nlohmann::json> read_lines(const fs::path& p) {
    std::vector<nlohmann::json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
}

TEST_F(DlrmTrain, OnePassEndsNearTheTeachersAuc) {
    // Learnability (issue 13): after one pass over a synthetic log the held-out AUC is within
    // 0.01 of the teacher's, the best any model can reach on these labels.
    const std::string train = (dir_ / "t.ctr").string(), eval = (dir_ / "e.ctr").string();
    // Small tables, so that one pass sees every id often; AdamW with a cosine decay (a constant
    // rate ended 0.01 short: the last steps' noise). Seen: 0.0042-0.0057 below the teacher over
    // seeds 1, 5 and 11.
    SynthCtrOptions so;
    so.records = 1000000;
    so.eval_records = 20000;
    so.seed = 11;
    so.table_rows = {100, 50, 50, 20, 10, 5};
    const SynthCtrResult synth = write_synth_ctr(so, train, eval);
    const int64_t B = 256, steps = so.records / B;
    nlohmann::json j = {
        {"train_micro_batch_size_per_gpu", B},
        {"steps", steps},
        {"steps_per_print", 1000},
        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 5e-3}}}}},
        {"scheduler",
         {{"type", "WarmupCosineLR"},
          {"params",
           {{"warmup_num_steps", 50}, {"total_num_steps", steps}, {"cos_min_ratio", 0.01}}}}},
        {"model",
         {{"type", "dlrm"},
          {"table_rows", so.table_rows},
          {"embedding_dim", 16},
          {"bottom_mlp", {64, 16}},
          {"top_mlp", {64, 32}}}},
        {"data", {{"type", "ctr"}, {"path", train}, {"eval_path", eval}}},
        {"eval_interval", steps},
        {"eval_iters", so.eval_records / B},
        {"threads", 1}};
    const ParsedConfig pc = parse_config(j);
    TrainOptions o;
    o.run_dir = (dir_ / "run").string();
    o.quiet = true;
    run_training(pc.config, o);
    double auc = -1;
    for (const nlohmann::json& line : read_lines(fs::path(o.run_dir) / "metrics.jsonl"))
        if (line.contains("eval_auc")) {
            auc = line["eval_auc"].get<double>();
            EXPECT_TRUE(line.contains("eval_log_loss"));
            EXPECT_EQ(line["eval_samples"].get<int64_t>(), (so.eval_records / B) * B);
        }
    std::printf("teacher AUC %.4f, model AUC after one pass %.4f\n", synth.teacher_auc, auc);
    EXPECT_GT(auc, synth.teacher_auc - 0.01);
    EXPECT_LE(auc, synth.teacher_auc + 0.01);
    EXPECT_TRUE(fs::exists(fs::path(o.run_dir) / "model.safetensors"));
}

}  // namespace
}  // namespace zt
