// DLRM against PyTorch (issue 13): the same model written as the facebookresearch/dlrm reference
// builds it (tests/python/dlrm_reference.py: nn.EmbeddingBag, the reference's interaction order,
// BCE from logits), the same initial weights through safetensors, the same batches (multi-hot
// bags, an empty bag, per-sample weights, sum and mean tables): the losses of 10 SGD steps agree
// within 1e-5 relative, and zerotrain's exported final weights load into the PyTorch module
// (strict) and match PyTorch's own final weights. Skipped when /usr/bin/python3 lacks torch
// (a failure under ZT_REQUIRE_READERS=1).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "data/click/click_dataset.h"
#include "data/click/synth_ctr.h"
#include "models/dlrm/dlrm_family.h"
#include "models/registry.h"
#include "optim/sgd.h"
#include "reader_required.h"
#include "run_command.h"
#include "runtime/engine.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

TEST(DlrmTorch, TenSgdStepsMatchPyTorch) {
    const fs::path dir = fs::temp_directory_path() / str_cat("zt_dlrm_torch_", ::getpid());
    fs::remove_all(dir);
    fs::create_directories(dir);
    const nlohmann::json model = {{"type", "dlrm"},
                                  {"dense_features", 13},
                                  {"tables",
                                   {{{"rows", 40}, {"dim", 8}, {"pooling", "sum"}},
                                    {{"rows", 25}, {"dim", 8}, {"pooling", "mean"}},
                                    {{"rows", 9}, {"dim", 8}, {"pooling", "sum"}}}},
                                  {"bottom_mlp", {12, 8}},
                                  {"top_mlp", {10, 1}},
                                  {"self_interaction", false}};
    std::vector<std::string> warnings, errors;
    const nlohmann::json root = {{"model", model}, {"data", nlohmann::json::object()}};
    config_detail::Section s(root, "", warnings, errors);
    auto family = parse_model_family(s, FamilyContext{});
    ASSERT_TRUE(family) << (errors.empty() ? "" : errors[0]);

    const std::string data = (dir / "d.ctr").string();
    SynthCtrOptions so;
    so.records = 400;
    so.seed = 5;
    so.table_rows = {40, 25, 9};
    so.hotness = 3;
    write_synth_ctr(so, data);
    const ClickDataset ds(CtrFile::open(data), ClickDatasetOptions{});

    MemoryPool pool;
    EngineOptions eo;
    eo.lr = 0.1;
    eo.seed = 3;
    eo.optimizer = std::make_unique<Sgd>(SgdOptions{});
    Engine e(pool, family->build(), std::move(eo));
    auto named = [&](std::vector<float>& whole) {
        std::vector<NamedTensorF32> v;
        for (Parameter* p : e.arena().params())
            v.push_back({p->name, p->shape, whole.data() + p->offset});
        return v;
    };
    std::vector<float> init = e.gather_master();
    family->export_weights((dir / "init.safetensors").string(), named(init), "F32");

    constexpr int kSteps = 10, kB = 16;
    constexpr double kLr = 0.1;
    std::vector<ClickBatchBuffers> bufs(kSteps);
    SafetensorsWriter batches;
    std::vector<double> losses;
    for (int step = 0; step < kSteps; ++step) {
        ClickBatchBuffers& b = bufs[static_cast<size_t>(step)];
        ds.fill(int64_t{step} * kB, kB, b);
        // An empty bag in table 1, per-sample weights on table 0.
        if (step == 2) {
            std::vector<int64_t>& off = b.offsets[1];
            const int64_t gone = off[4] - off[3];
            b.ids[1].erase(b.ids[1].begin() + off[3], b.ids[1].begin() + off[4]);
            for (size_t i = 4; i < off.size(); ++i) off[i] -= gone;
        }
        b.weights.assign(3, {});
        for (size_t j = 0; j < b.ids[0].size(); ++j)
            b.weights[0].push_back(0.25f + 0.5f * static_cast<float>(j % 4));
        const std::string p = std::to_string(step) + ".";
        batches.add(p + "dense", "F32", {kB, 13}, b.dense.data(), b.dense.size() * 4);
        batches.add(p + "labels", "F32", {kB}, b.labels.data(), b.labels.size() * 4);
        for (int k = 0; k < 3; ++k) {
            const auto& ids = b.ids[static_cast<size_t>(k)];
            const auto& off = b.offsets[static_cast<size_t>(k)];
            batches.add(p + "ids" + std::to_string(k), "I64", {static_cast<int64_t>(ids.size())},
                        ids.data(), ids.size() * 8);
            batches.add(p + "offsets" + std::to_string(k), "I64",
                        {static_cast<int64_t>(off.size())}, off.data(), off.size() * 8);
        }
        batches.add(p + "weights0", "F32", {static_cast<int64_t>(b.weights[0].size())},
                    b.weights[0].data(), b.weights[0].size() * 4);
        const ClickBatch click = b.view();
        Batch batch;
        batch.B = click.B;
        batch.click = &click;
        e.forward_backward(batch);
        losses.push_back(e.step().loss);
    }
    batches.write((dir / "batches.safetensors").string());
    std::vector<float> final_w = e.gather_master();
    family->export_weights((dir / "final.safetensors").string(), named(final_w), "F32");

    nlohmann::json cfg = model;
    cfg["tables"] = family->describe_json()["tables"];
    cfg["top_mlp"] = as_dlrm(*family).options().top_mlp;
    const testing::CommandResult res = testing::run_command(str_cat(
        "/usr/bin/python3 '", ZT_SOURCE_DIR, "/tests/python/dlrm_reference.py' '", cfg.dump(), "' ",
        (dir / "init.safetensors").string(), " ", (dir / "batches.safetensors").string(), " ",
        kSteps, " ", kLr, " ", (dir / "final.safetensors").string()));
    const int status = res.code;
    const std::string& out = res.output;
    fs::remove_all(dir);
    if (status == 77 || status == 127) ZT_READER_MISSING("PyTorch reference unavailable: " << out);
    ASSERT_EQ(status, 0) << out;
    const nlohmann::json r = nlohmann::json::parse(out.substr(out.rfind('{')));
    ASSERT_EQ(r["losses"].size(), static_cast<size_t>(kSteps));
    for (int i = 0; i < kSteps; ++i) {
        const double t = r["losses"][static_cast<size_t>(i)].get<double>();
        EXPECT_NEAR(losses[static_cast<size_t>(i)], t, 1e-5 * std::abs(t)) << "step " << i;
    }
    EXPECT_LT(losses.back(), losses.front());
    EXPECT_LT(r["final_weights_max_rel_diff"].get<double>(), 1e-4);
}

}  // namespace
}  // namespace zt
