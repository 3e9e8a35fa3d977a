// fp16 mixed precision and non-finite steps in the Engine: gradients against fp32, planted
// overflows (forward and backward) against the loss scaler's rules, nan_policy "stop" naming the
// module or parameter, nan_policy "skip" leaving the weights alone, and the default example
// converging in fp16 through the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "models/gpt/gpt.h"
#include "optim/sgd.h"
#include "models/gpt/gpt_family.h"
#include "runtime/config.h"
#include "data/tokens/builtin_corpus.h"
#include "runtime/engine.h"
#include "runtime/trainer.h"
#include "util/random.h"

namespace zt {
namespace {

constexpr int64_t kB = 4, kT = 16, kV = 37, kC = 32;

struct Made {
    std::unique_ptr<Engine> engine;
    Gpt* gpt;
};

Made make_engine(MemoryPool& pool, DType dt, int64_t grad_accum = 1,
                 NanPolicy policy = NanPolicy::kSkip, LossScalerOptions ls = {}) {
    EngineOptions eo;
    eo.compute_dtype = dt;
    eo.grad_accum = grad_accum;
    eo.nan_policy = policy;
    eo.loss_scaler = ls;
    eo.lr = 0.1;
    eo.seed = 11;
    eo.optimizer = std::make_unique<Sgd>(SgdOptions{});
    auto gpt = std::make_unique<Gpt>(GptOptions{kV, kT, kC, 2, 2});
    Gpt* raw = gpt.get();
    return {std::make_unique<Engine>(pool, std::move(gpt), std::move(eo)), raw};
}

std::vector<int32_t> tokens(int64_t n, uint64_t stream) {
    std::vector<int32_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(uniform01(3, stream, i) * kV);
    return v;
}

struct Data {
    std::vector<int32_t> in = tokens(kB * kT, 1), tg = tokens(kB * kT, 2);
    Batch batch() const { return Batch{in, tg, kB, kT}; }
};

std::vector<float> copy_of(const Tensor& t) { return t.to_vector(); }

// max |a - b| / max |b|.
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, double a_scale = 1) {
    double scale = 0, diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
        diff = std::max(diff, std::fabs(a[i] / a_scale - b[i]));
    }
    return diff / scale;
}

void set_param(Engine& e, const std::string& name, float value, int64_t index = -1) {
    Parameter* p = e.arena().find(name);
    ASSERT_NE(p, nullptr) << name;
    float* w = p->master.data<float>();
    for (int64_t i = 0; i < p->numel(); ++i)
        if (index < 0 || i == index) w[i] = value;
    e.arena().sync_compute();
}

TEST(Fp16, GradientsAndUpdateCloseToFp32) {
    Data d;
    MemoryPool pool;
    Made f32 = make_engine(pool, DType::kF32, 2);
    Made f16 = make_engine(pool, DType::kF16, 2);  // 2 micro-batches: seed scale / 2
    ASSERT_NE(f16.engine->loss_scaler(), nullptr);
    EXPECT_EQ(f32.engine->loss_scaler(), nullptr);
    const double scale = f16.engine->loss_scaler()->scale();
    EXPECT_EQ(scale, 65536.0);  // DeepSpeed's default initial_scale_power 16
    for (int m = 0; m < 2; ++m) {
        const float l32 = f32.engine->forward_backward(d.batch());
        const float l16 = f16.engine->forward_backward(d.batch());
        // f16 activations keep 11 significant bits (2^-11 = 4.9e-4 relative); near-uniform
        // logits at init lose little of that: seen 2.8e-6.
        EXPECT_NEAR(l16, l32, 1e-4 * l32);
    }
    // The f32 gradient arena holds scale x the gradient until step(). Every activation and
    // activation gradient rounded to f16 through two blocks: seen 8.6e-4 of the largest.
    const auto g32 = copy_of(f32.engine->arena().grads());
    EXPECT_LT(max_rel_diff(copy_of(f16.engine->arena().grads()), g32, scale), 5e-3);
    const auto w0 = copy_of(f32.engine->arena().master());
    StepStats s32 = f32.engine->step(), s16 = f16.engine->step();
    EXPECT_FALSE(s16.skipped);
    EXPECT_EQ(s16.loss_scale, 65536.0);
    EXPECT_EQ(s32.loss_scale, 0.0);
    EXPECT_NEAR(s16.grad_norm, s32.grad_norm, 1e-3 * s32.grad_norm);  // seen 6.9e-5
    // The SGD update (w - lr g) from the unscaled gradients: compare the steps taken.
    std::vector<float> d32 = copy_of(f32.engine->arena().master()),
                       d16 = copy_of(f16.engine->arena().master());
    for (size_t i = 0; i < w0.size(); ++i) d32[i] -= w0[i], d16[i] -= w0[i];
    EXPECT_LT(max_rel_diff(d16, d32), 5e-3);  // as the gradients: seen 8.6e-4
    // The f16 compute copy follows the master weights.
    const auto master = copy_of(f16.engine->arena().master());
    const auto compute = copy_of(f16.engine->arena().compute());
    for (size_t i = 0; i < master.size(); ++i)
        ASSERT_EQ(compute[i], f16_to_f32(f32_to_f16(master[i]))) << i;
}

// Backward overflow: a scale of 2^40 makes dlogits = 2^40 / (B T) far beyond f16's 65504. With
// hysteresis 1 every overflow halves the scale and skips its step until the gradients fit.
TEST(Fp16, BackwardOverflowSkipsAndHalvesUntilItFits) {
    Data d;
    MemoryPool pool;
    LossScalerOptions ls;
    ls.initial_scale_power = 40;
    ls.hysteresis = 1;
    Made f16 = make_engine(pool, DType::kF16, 1, NanPolicy::kStop, ls);  // overflow is no stop
    const auto w0 = copy_of(f16.engine->arena().master());
    double expect_scale = std::ldexp(1.0, 40);
    int skipped = 0;
    for (;;) {
        ASSERT_LT(skipped, 40) << "never stopped overflowing";
        f16.engine->forward_backward(d.batch());
        StepStats st = f16.engine->step();
        EXPECT_EQ(st.loss_scale, expect_scale);
        EXPECT_TRUE(std::isfinite(st.loss));  // the forward is not scaled
        if (!st.skipped) break;
        ++skipped;
        EXPECT_FALSE(std::isfinite(st.grad_norm));
        EXPECT_EQ(copy_of(f16.engine->arena().master()), w0) << "a skipped step changed weights";
        expect_scale /= 2;  // hysteresis 1: each overflow halves
        EXPECT_EQ(f16.engine->loss_scaler()->scale(), expect_scale);
    }
    // dlogits = scale / 64 (p - onehot) alone overflows while scale / 64 > 65504, i.e. for
    // scale >= 2^23; activation gradients deeper in may need more halvings (seen: 20 skips, the
    // first clean step at 2^20).
    EXPECT_GE(skipped, 40 - 22);
    EXPECT_EQ(f16.engine->steps_done(), skipped + 1);
    EXPECT_NE(copy_of(f16.engine->arena().master()), w0);
    EXPECT_EQ(f16.engine->loss_scaler()->scale(), expect_scale);  // a clean step keeps it
}

// Forward overflow: ln_2's bias 1 makes its output sum to exactly C per row (LayerNorm output
// sums to 0 before the bias), so c_fc with every weight 60000 (finite in f16) outputs
// 60000 C = 1.9e6: infinity in f16.
void plant_forward_overflow(Engine& e) {
    set_param(e, "transformer.h.0.ln_2.bias", 1.0f);
    set_param(e, "transformer.h.0.mlp.c_fc.weight", 60000.0f);
}

TEST(Fp16, ForwardOverflowFollowsHysteresisAndKeepsWeights) {
    Data d;
    MemoryPool pool;
    Made f16 = make_engine(pool, DType::kF16);  // hysteresis 2 (default)
    plant_forward_overflow(*f16.engine);
    const auto w0 = copy_of(f16.engine->arena().master());
    // (scale used, scale after, cur_hysteresis after) per step, from DeepSpeed's rules:
    const double want[][3] = {
        {65536, 65536, 1},  // overflow with cur_hysteresis 2: it drops to 1, the scale stays
        {65536, 32768, 1},  // overflow with cur_hysteresis 1: the scale halves
        {32768, 16384, 1},  // again
    };
    for (const auto& w : want) {
        f16.engine->forward_backward(d.batch());
        StepStats st = f16.engine->step();
        EXPECT_TRUE(st.skipped);
        EXPECT_FALSE(std::isfinite(st.loss));
        EXPECT_EQ(st.loss_scale, w[0]);
        EXPECT_EQ(f16.engine->loss_scaler()->scale(), w[1]);
        EXPECT_EQ(f16.engine->loss_scaler()->state().cur_hysteresis, w[2]);
    }
    EXPECT_EQ(f16.engine->steps_done(), 3);
    EXPECT_EQ(copy_of(f16.engine->arena().master()), w0);
}

void expect_stop(Engine& e, const Data& d, const std::vector<std::string>& needles) {
    e.forward_backward(d.batch());
    try {
        e.step();
        FAIL() << "expected nan_policy stop to throw";
    } catch (const Error& err) {
        EXPECT_EQ(err.kind(), ErrorKind::kInternal);
        for (const auto& s : needles)
            EXPECT_NE(err.message().find(s), std::string::npos) << "'" << s << "' not in: "
                                                                << err.message();
    }
}

TEST(Fp16, StopNamesTheModuleThatOverflowedInForward) {
    Data d;
    MemoryPool pool;
    Made f16 = make_engine(pool, DType::kF16, 1, NanPolicy::kStop);
    plant_forward_overflow(*f16.engine);
    expect_stop(*f16.engine, d,
                {"non-finite loss at step 1", "module 'transformer.h.0.mlp.c_fc'", "nan_policy stop"});
}

TEST(NanPolicy, StopNamesTheModuleWhoseOutputWentNonFinite) {
    Data d;
    for (DType dt : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE(dtype_name(dt));
        MemoryPool pool;
        Made m = make_engine(pool, dt, 1, NanPolicy::kStop);
        set_param(*m.engine, "transformer.h.1.mlp.c_fc.weight", std::nanf(""), 5);
        expect_stop(*m.engine, d,
                    {"non-finite loss at step 1", "module 'transformer.h.1.mlp.c_fc'",
                     "nan_policy stop"});
    }
}

// A finite forward with a NaN planted in one parameter's gradient (by a pre-backward hook).
TEST(NanPolicy, StopNamesTheParameterWhenOnlyGradientsWentNonFinite) {
    Data d;
    MemoryPool pool;
    Made m = make_engine(pool, DType::kF32, 1, NanPolicy::kStop);
    Linear& c_proj = m.gpt->transformer.h[0]->attn.c_proj;
    c_proj.add_hook(HookPoint::kPreBackward,
                    [&](Module&) { c_proj.weight.grad.data<float>()[3] = std::nanf(""); });
    expect_stop(*m.engine, d,
                {"non-finite gradients at step 1", "'transformer.h.0.attn.c_proj.weight'",
                 "nan_policy stop"});
}

TEST(NanPolicy, SkipLeavesTheWeightsAndCountsTheStep) {
    Data d;
    MemoryPool pool;
    Made m = make_engine(pool, DType::kF32);
    set_param(*m.engine, "transformer.h.1.mlp.c_fc.weight", std::nanf(""), 5);
    const auto w0 = copy_of(m.engine->arena().master());
    m.engine->forward_backward(d.batch());
    StepStats st = m.engine->step();
    EXPECT_TRUE(st.skipped);
    EXPECT_FALSE(std::isfinite(st.loss));
    EXPECT_EQ(st.loss_scale, 0.0);
    EXPECT_EQ(m.engine->steps_done(), 1);
    const auto w1 = copy_of(m.engine->arena().master());
    ASSERT_EQ(w0.size(), w1.size());
    EXPECT_EQ(0, std::memcmp(w0.data(), w1.data(), w0.size() * sizeof(float)));  // NaN too
    for (float g : copy_of(m.engine->arena().grads())) ASSERT_EQ(g, 0.0f);  // zeroed for next
}

TEST(Fp16, ConfigMapsOntoEngineOptions) {
    auto j = nlohmann::json::parse(R"({
        "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12,
                 "loss_scale_window": 50, "hysteresis": 3, "consecutive_hysteresis": true,
                 "min_loss_scale": 0.25},
        "nan_policy": "stop"})");
    EngineOptions eo = engine_options(parse_config(j).config);
    EXPECT_EQ(eo.compute_dtype, DType::kF16);
    EXPECT_EQ(eo.grad_dtype, DType::kF32);
    EXPECT_EQ(eo.nan_policy, NanPolicy::kStop);
    EXPECT_EQ(eo.loss_scaler.static_scale, 0.0);
    EXPECT_EQ(eo.loss_scaler.initial_scale_power, 12);
    EXPECT_EQ(eo.loss_scaler.scale_window, 50);
    EXPECT_EQ(eo.loss_scaler.hysteresis, 3);
    EXPECT_TRUE(eo.loss_scaler.consecutive_hysteresis);
    EXPECT_EQ(eo.loss_scaler.min_scale, 0.25);
    EXPECT_EQ(engine_options(parse_config(nlohmann::json::object()).config).nan_policy,
              NanPolicy::kSkip);

    j["data_types"] = {{"grad_accum_dtype", "bf16"}};  // fp16 accumulates in fp32 only
    try {
        engine_options(parse_config(j).config);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("grad_accum_dtype"), std::string::npos) << e.message();
    }
}

namespace fs = std::filesystem;

// examples/gpt-tiny.json with fp16.enabled through the CLI, shortened to 200 steps (cosine
// schedule to 200) to keep the test near 10 s on two cores. The issue's figure is the bigram
// bound (1.29 nats here): fp16 ended at 1.15 (train) and 1.16 (eval) at 200 steps, and 0.71 at
// the full 600 like fp32 (0.71); the default example's own test holds the 600-step fp32 run to
// the entropy rate.
TEST(Fp16, DefaultExampleConvergesBelowTheBigramBound) {
    const std::string cfg_path = std::string(ZT_SOURCE_DIR) + "/examples/gpt-tiny.json";
    TrainConfig cfg = parse_config(load_config_file(cfg_path)).config;
    BuiltinCorpusOptions co;
    co.vocab_size = as_gpt(*cfg.model).options().vocab_size;
    co.alphabet = std::min<int64_t>(64, as_gpt(*cfg.model).options().vocab_size);
    co.period = as_gpt(*cfg.model).options().seq_len;
    co.n_tokens = as_gpt(*cfg.model).data().builtin_tokens;
    co.seed = as_gpt(*cfg.model).data().builtin_seed;
    CorpusInfo info;
    generate_builtin_corpus(co, &info);

    fs::path rd = fs::temp_directory_path() / ("zt_fp16_" + std::to_string(::getpid()));
    fs::remove_all(rd);
    const std::string cmd = std::string(ZT_BINARY) + " train " + cfg_path + " --run-dir " +
                            rd.string() +
                            " --quiet --threads 2 --set fp16.enabled=true --set steps=200"
                            " --set scheduler.params.total_num_steps=200 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    double last_loss = -1, last_eval = -1;
    int lines = 0, skipped = 0;
    std::ifstream f(rd / "metrics.jsonl");
    std::string line;
    while (std::getline(f, line)) {
        auto j = nlohmann::json::parse(line);
        if (j.contains("eval_loss")) {
            last_eval = j["eval_loss"];
            continue;
        }
        ++lines;
        last_loss = j["loss"];
        skipped += j["skipped"].get<bool>();
        ASSERT_TRUE(j.contains("loss_scale")) << "fp16 metrics carry loss_scale: " << line;
        EXPECT_GE(j["loss_scale"].get<double>(), 1.0);
    }
    fs::remove_all(rd);
    std::printf("bigram bound %.4f, fp16 final loss %.4f, eval %.4f, %d skipped\n",
                info.bigram_bound, last_loss, last_eval, skipped);
    EXPECT_EQ(lines, 200);
    EXPECT_LE(skipped, 10);  // the scale starts at 2^16: overflows, if any, are early and few
    EXPECT_LT(last_loss, info.bigram_bound);
    EXPECT_LT(last_eval, info.bigram_bound);
}

}  // namespace
}  // namespace zt
