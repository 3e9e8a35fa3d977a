// The memory estimator: its per-rank model-state bytes against DESIGN.md's ZeRO expressions
// (written out here from DESIGN.md, Memory model), and its whole estimate against what the engine
// allocates for the example config: params, grads and optimizer bytes exactly, activations within
// 10% of the measured peak.
#include "planner/estimate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "models/gpt/gpt.h"
#include "models/gpt/gpt_family.h"
#include "models/gpt/gpt_memory.h"
#include "planner/estimate_report.h"
#include "runtime/config.h"
#include "runtime/run_estimate.h"
#include "runtime/trainer.h"
#include "util/random.h"

namespace zt {

namespace {

int64_t at(const CategoryBytes& c, MemCategory k) { return c[static_cast<int>(k)]; }

int64_t model_state(const CategoryBytes& c) {
    return at(c, MemCategory::kParams) + at(c, MemCategory::kGrads) +
           at(c, MemCategory::kOptimizer);
}

// DESIGN.md, Memory model, for Adam, per rank, P parameters (padded) over N ranks:
// mixed precision DDP (14+g)P; ZeRO-1 (2+g)P + 12P/N; ZeRO-2 2P + (12+g)P/N; ZeRO-3 (14+g)P/N.
// Plain fp32: DDP 16P; ZeRO-1 8P + 8P/N; ZeRO-2 4P + 12P/N; ZeRO-3 16P/N.
int64_t design_bytes(bool mixed, int stage, int64_t g, int64_t P, int64_t N) {
    if (mixed) {
        switch (stage) {
            case 0:
                return (14 + g) * P;
            case 1:
                return (2 + g) * P + 12 * P / N;
            case 2:
                return 2 * P + (12 + g) * P / N;
            default:
                return (14 + g) * P / N;
        }
    }
    switch (stage) {
        case 0:
            return 16 * P;
        case 1:
            return 8 * P + 8 * P / N;
        case 2:
            return 4 * P + 12 * P / N;
        default:
            return 16 * P / N;
    }
}

const char* design_text(bool mixed, int stage) {
    static const char* kMixed[] = {"(14+g)Psi", "(2+g)Psi + 12Psi/N", "2Psi + (12+g)Psi/N",
                                   "(14+g)Psi/N"};
    static const char* kFp32[] = {"16Psi", "8Psi + 8Psi/N", "4Psi + 12Psi/N", "16Psi/N"};
    return (mixed ? kMixed : kFp32)[stage];
}

struct Precision {
    DType compute, grad;
};
const Precision kPrecisions[] = {{DType::kF32, DType::kF32},
                                 {DType::kBF16, DType::kF32},
                                 {DType::kBF16, DType::kBF16},
                                 {DType::kF16, DType::kF32}};

}  // namespace

TEST(StateBytes, MatchesDesignFormulasWithPadding) {
    const int64_t psi = 1001;  // 7 x 11 x 13: divisible by none of 2, 3, 4
    for (const Precision& pr : kPrecisions)
        for (int stage = 0; stage <= 3; ++stage)
            for (int64_t N = 1; N <= 4; ++N) {
                StateSpec s;
                s.param_count = psi;
                s.ranks = N;
                s.zero_stage = stage;
                s.compute_dtype = pr.compute;
                s.grad_dtype = pr.grad;
                s.alignment = 1;  // DESIGN.md's expressions count elements, not pool blocks
                const StateEstimate e = estimate_state(s);
                const int64_t P = (psi + N - 1) / N * N;
                SCOPED_TRACE(str_cat(dtype_name(pr.compute), "/", dtype_name(pr.grad), " stage ",
                                     stage, " N ", N));
                EXPECT_EQ(e.padded_numel, P);
                EXPECT_EQ(e.shard_numel * N, P);
                const bool mixed = pr.compute != DType::kF32;
                const int64_t g = static_cast<int64_t>(dtype_size(pr.grad));
                EXPECT_EQ(model_state(e.device), design_bytes(mixed, stage, g, P, N));
                EXPECT_EQ(model_state(e.host), 0);
                const ZeroFormula f = zero_formula(s);
                EXPECT_EQ(f.text, design_text(mixed, stage));
                EXPECT_DOUBLE_EQ(f.bytes(static_cast<double>(P), static_cast<double>(N)),
                                 static_cast<double>(design_bytes(mixed, stage, g, P, N)));
                // The f32 gradient copy exists exactly when gradients are not f32.
                EXPECT_EQ(at(e.device, MemCategory::kWorkspace),
                          g == 4 ? 0 : 4 * (stage >= 1 ? P / N : P));
                // Note [Reduce buckets in the estimate]: stage 0 reduces in place, stage 1
                // receives into a buffer at any rank count, stages 2-3 lend buckets.
                EXPECT_EQ(at(e.device, MemCategory::kComm) > 0, N > 1 || stage >= 1);
            }
}

TEST(StateBytes, RoundsEveryBufferToThePoolAlignment) {
    StateSpec s;
    s.param_count = 1001;
    s.ranks = 3;
    s.zero_stage = 1;
    s.compute_dtype = DType::kBF16;
    for (const BufferEstimate& b : estimate_state(s).buffers) {
        EXPECT_EQ(b.bytes % 64, 0) << b.name;
        EXPECT_GE(b.bytes, b.numel * b.elem_bytes) << b.name;
        EXPECT_LT(b.bytes, b.numel * b.elem_bytes + 64) << b.name;
    }
}

TEST(StateBytes, SgdStateAndOptimizerOffload) {
    StateSpec s;
    s.param_count = 1001;
    s.ranks = 4;
    s.zero_stage = 2;
    s.compute_dtype = DType::kBF16;
    s.alignment = 1;
    const int64_t S = 1004 / 4;
    s.optimizer_states = 1;  // SGD with momentum: 4 bytes of state per element
    EXPECT_EQ(at(estimate_state(s).device, MemCategory::kOptimizer), 4 * S);
    EXPECT_EQ(zero_formula(s).text, "2Psi + (8+g)Psi/N");
    s.optimizer_states = 0;
    EXPECT_EQ(at(estimate_state(s).device, MemCategory::kOptimizer), 0);

    s.optimizer_states = 2;
    const StateEstimate on_device = estimate_state(s);
    s.offload_optimizer = true;
    const StateEstimate off = estimate_state(s);
    // Master weights and m, v of the shard move to the host, and at stage 2 its f32 gradients
    // too (Note [Gradients on the host]). Staging: 4 buffers, each of one sub-group (the shard,
    // rounded up to 1024 elements) of bf16 compute weights, rounded up to 4 KiB; the gradients
    // are read where they are and the cpu tier is updated in place.
    EXPECT_EQ(at(off.device, MemCategory::kOptimizer), 0);
    EXPECT_EQ(at(off.host, MemCategory::kOptimizer), 8 * S);
    EXPECT_EQ(at(off.host, MemCategory::kParams), 4 * S);
    EXPECT_EQ(at(off.host, MemCategory::kWorkspace), 4 * 4096);
    EXPECT_EQ(at(off.device, MemCategory::kParams), 2 * 1004);
    EXPECT_EQ(at(off.device, MemCategory::kGrads), 0);
    EXPECT_EQ(at(off.host, MemCategory::kGrads), at(on_device.device, MemCategory::kGrads));
    EXPECT_EQ(at(off.host, MemCategory::kGrads), 4 * S);
    EXPECT_EQ(model_state(off.device) + model_state(off.host), model_state(on_device.device));
    EXPECT_EQ(model_state(off.nvme), 0);

    // The nvme tier: the same bytes in swap files, the gradients in host memory; staging also
    // holds each sub-group's record (master weights, m and v: 3 x 1024 f32).
    s.offload_nvme = true;
    const StateEstimate disk = estimate_state(s);
    EXPECT_EQ(at(disk.nvme, MemCategory::kOptimizer), 8 * S);
    EXPECT_EQ(at(disk.nvme, MemCategory::kParams), 4 * S);
    EXPECT_EQ(model_state(disk.host), 4 * S);
    EXPECT_EQ(at(disk.host, MemCategory::kWorkspace), 4 * (3 * 1024 * 4 + 4096));
    EXPECT_EQ(model_state(disk.device) + model_state(disk.nvme) + model_state(disk.host),
              model_state(on_device.device));
    // Stage 1 keeps the whole gradient on the device, with a staging copy of it.
    s.zero_stage = 1;
    const StateEstimate one = estimate_state(s);
    EXPECT_EQ(at(one.device, MemCategory::kGrads), 4 * 1004);
    EXPECT_EQ(at(one.host, MemCategory::kGrads), 0);
    EXPECT_EQ(at(one.host, MemCategory::kWorkspace), 4 * (3 * 1024 * 4 + 1024 * 4 + 4096));

    // Parameters offloaded too (ZeRO-Infinity, stage 3 only): the bf16 shard leaves the device.
    s.zero_stage = 3;
    s.offload_param = true;
    s.offload_param_nvme = true;
    const StateEstimate inf = estimate_state(s);
    EXPECT_EQ(at(inf.device, MemCategory::kParams), 0);
    EXPECT_EQ(at(inf.nvme, MemCategory::kParams), 2 * S + 4 * S);
    s.offload_param_nvme = false;
    EXPECT_EQ(at(estimate_state(s).host, MemCategory::kParams), 2 * S);
    s.zero_stage = 2;  // below stage 3 the weights stay whole on the device
    EXPECT_EQ(at(estimate_state(s).device, MemCategory::kParams), 2 * 1004);
}

// Adagrad and Lion keep one f32 buffer per element (4 bytes), named as the optimizer names it.
TEST(StateBytes, AdagradAndLionKeepOneBufferEach) {
    EXPECT_EQ(optimizer_state_names_of("Adagrad", false), std::vector<std::string>{"sum"});
    EXPECT_EQ(optimizer_state_names_of("Lion", false), std::vector<std::string>{"exp_avg"});
    EXPECT_EQ(optimizer_state_names_of("AdamW", false).size(), 2u);
    EXPECT_EQ(optimizer_state_names_of("SGD", true), std::vector<std::string>{"momentum_buffer"});
    EXPECT_TRUE(optimizer_state_names_of("SGD", false).empty());
    StateSpec s;
    s.param_count = 1001;
    s.ranks = 4;
    s.zero_stage = 1;
    s.compute_dtype = DType::kBF16;
    s.alignment = 1;
    s.optimizer_state_names = optimizer_state_names_of("Lion", false);
    s.optimizer_states = 1;
    const StateEstimate e = estimate_state(s);
    EXPECT_EQ(at(e.device, MemCategory::kOptimizer), 4 * (1004 / 4));
    bool named = false;
    for (const BufferEstimate& b : e.buffers) named = named || b.name == "exp_avg (f32)";
    EXPECT_TRUE(named);
    EXPECT_EQ(zero_formula(s).text, "(2+g)Psi + 8Psi/N");  // master 4 + state 4, sharded
}

// ZeRO++ hpZ: a 1/L slice of the weights in the compute dtype beside stage 3's shard.
// 1-bit Adam: the f32 worker residual of the arena, server residual and segment of 1/N, and the
// sign codec's bytes (a bit a value, an f32 scale per 256): every segment sent, N received.
TEST(StateBytes, HpzSliceAndOneBitAdamResiduals) {
    StateSpec s;
    s.param_count = 10000;
    s.ranks = 4;
    s.zero_stage = 3;
    s.compute_dtype = DType::kBF16;
    s.alignment = 1;
    const int64_t plain = at(estimate_state(s).device, MemCategory::kParams);
    s.hpz_partition_size = 2;
    EXPECT_EQ(at(estimate_state(s).device, MemCategory::kParams), plain + 2 * 10000 / 2);

    StateSpec o;
    o.param_count = 10000;
    o.ranks = 4;
    o.alignment = 1;
    const StateEstimate before = estimate_state(o);
    o.onebit_adam = true;
    const StateEstimate e = estimate_state(o);
    // 2500 values: ceil(2500 / 8) bytes of signs and ceil(2500 / 256) scales, padded to 4 bytes.
    const int64_t sign_2500 = ((2500 + 7) / 8 + 4 * ((2500 + 255) / 256) + 3) / 4 * 4;
    const int64_t resident = 4 * 10000 + 4 * 2500 + 4 * 2500;
    EXPECT_EQ(e.resident_comm, resident);
    EXPECT_EQ(at(e.device, MemCategory::kComm) - at(before.device, MemCategory::kComm),
              resident + 4 * sign_2500 + 4 * sign_2500);
    EXPECT_EQ(model_state(e.device), model_state(before.device));  // Adam's m and v, as AdamW
}

// Note [Reduce buckets in the estimate]: buckets planned from the last parameter back, closing
// once they reach the size: {10, 3, 3, 3, 3} with size 5 gives [3 3] [3 3] [10]; while the first
// lands (6 lent, 6 received) the second fills, and the early parameter 0's bucket is lent too.
TEST(StateBytes, ReduceBucketPeakPlaysOutTheBackward) {
    const std::vector<int64_t> numels = {10, 3, 3, 3, 3};
    StateSpec::Buckets b = reduce_bucket_peak(numels, {0}, 1, 5);
    EXPECT_EQ(b.largest, 10);
    EXPECT_EQ(b.largest_param, 10);
    EXPECT_EQ(b.lent, 6 + 6 + 10);
    EXPECT_EQ(b.received, 6);
    b = reduce_bucket_peak(numels, {}, 1, 5);  // no early bucket: the second lands, [10] fills
    EXPECT_EQ(b.lent, 6 + 10);
    EXPECT_EQ(b.received, 6);
    // Padded to 24 over 4 ranks: [3 + 2 padding] [3 3] [10 3]; a rank receives at most its
    // shard of 6.
    b = reduce_bucket_peak(numels, {}, 4, 5);
    EXPECT_EQ(b.largest, 13);
    EXPECT_EQ(b.lent, 6 + 13);
    EXPECT_EQ(b.received, 6);
    EXPECT_EQ(reduce_bucket_peak({}, {}, 2, 5).lent, 0);
    // In the estimate: stages 2 and 3 hold them at any rank count, stage 0 at one rank nothing.
    StateSpec spec;
    spec.param_count = 22;
    spec.zero_stage = 2;
    spec.buckets = reduce_bucket_peak(numels, {0}, 1, 5);
    const StateEstimate e = estimate_state(spec);
    EXPECT_EQ(e.device[static_cast<int>(MemCategory::kComm)],
              round_up(22 * 4, spec.alignment) + round_up(6 * 4, spec.alignment));
    EXPECT_EQ(e.after_backward_comm, round_up(6 * 4, spec.alignment));
    spec.zero_stage = 0;
    EXPECT_EQ(estimate_state(spec).device[static_cast<int>(MemCategory::kComm)], 0);
}

TEST(Estimate, ParamCountMatchesTheModel) {
    for (const GptOptions& o : {GptOptions{256, 64, 64, 2, 4}, GptOptions{37, 11, 16, 3, 2}}) {
        Gpt gpt(o);
        EXPECT_EQ(gpt_param_count(o), gpt.num_params());
    }
}

namespace {

TrainConfig example_config(const std::vector<std::string>& sets) {
    nlohmann::json j = load_config_file(std::string(ZT_SOURCE_DIR) + "/examples/gpt-tiny.json");
    for (const std::string& s : sets) apply_override(j, s);
    return parse_config(j, 1).config;
}

// The spec `zerotrain estimate` and the trainer build for cfg on one rank at stage 0.
EstimateSpec spec_for(const TrainConfig& cfg) { return estimate_spec(cfg, 0, false, 1); }

struct Measured {
    MemoryStats after_step;
    int64_t activation_peak = 0;
    int64_t workspace_peak = 0;
};

// One micro-batch forward and backward, then a step, on a fresh pool.
Measured measure(const TrainConfig& cfg) {
    MemoryPool pool;
    Engine engine(pool, build_model(cfg), engine_options(cfg));
    const int64_t B = cfg.micro_batch, T = as_gpt(*cfg.model).options().seq_len,
                  V = as_gpt(*cfg.model).options().vocab_size;
    std::vector<int32_t> in(B * T), tg(B * T);
    for (int64_t i = 0; i < B * T; ++i) {
        in[i] = static_cast<int32_t>(uniform01(3, 1, i) * static_cast<double>(V));
        tg[i] = static_cast<int32_t>(uniform01(3, 2, i) * static_cast<double>(V));
    }
    pool.reset_peaks();
    engine.forward_backward(Batch{in, tg, B, T});
    Measured m;
    const MemoryStats during = pool.stats();
    m.activation_peak = at(during.peak, MemCategory::kActivations);
    m.workspace_peak = at(during.peak, MemCategory::kWorkspace);
    engine.step();
    m.after_step = pool.stats();
    return m;
}

}  // namespace

// The acceptance test: for the example, predicted params, grads and optimizer bytes equal
// the measured ones exactly, activations within 10% of the measured peak.
TEST(Estimate, MatchesTheEngineOnTheExample) {
    const std::vector<std::vector<std::string>> variants = {
        {},
        {"bf16.enabled=true"},
        {"bf16.enabled=true", "data_types.grad_accum_dtype=\"bf16\""},
        {"optimizer={\"type\": \"SGD\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9}}"},
        {"optimizer={\"type\": \"Adagrad\", \"params\": {\"lr\": 0.01}}"},
        {"bf16.enabled=true", "optimizer={\"type\": \"Lion\", \"params\": {\"lr\": 1e-4}}"},
        {"activation_checkpointing.policy=\"every\""},
        {"activation_checkpointing.policy=\"every_k\"", "activation_checkpointing.every_k=2"},
        {"bf16.enabled=true", "activation_checkpointing.policy=\"selective\""},
    };
    for (const auto& sets : variants) {
        std::string name;
        for (const std::string& s : sets) name += s + " ";
        SCOPED_TRACE(name);
        const TrainConfig cfg = example_config(sets);
        const Estimate est = estimate_run(spec_for(cfg));
        const Measured m = measure(cfg);
        for (MemCategory c : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer})
            EXPECT_EQ(at(est.state.device, c), at(m.after_step.current, c)) << mem_category_name(c);
        // What the engine holds in workspace between steps: the f32 gradient copy.
        EXPECT_EQ(at(est.state.device, MemCategory::kWorkspace),
                  at(m.after_step.current, MemCategory::kWorkspace));
        const double ratio =
            static_cast<double>(est.activations.peak) / static_cast<double>(m.activation_peak);
        std::printf(
            "[ %s] activations: predicted peak %lld, measured %lld (ratio %.4f); "
            "workspace peak: predicted %lld, measured %lld\n",
            name.c_str(), static_cast<long long>(est.activations.peak),
            static_cast<long long>(m.activation_peak), ratio,
            static_cast<long long>(at(est.device, MemCategory::kWorkspace)),
            static_cast<long long>(m.workspace_peak));
        EXPECT_NEAR(ratio, 1.0, 0.10);
    }
}

TEST(EstimateReport, TextStatesTheByteModel) {
    EstimateSpec spec;
    spec.model = std::make_shared<GptFamily>(GptOptions{256, 64, 64, 2, 4}, GptDataOptions{});
    spec.micro_batch = 4;
    spec.state.ranks = 3;
    spec.state.zero_stage = 2;
    spec.state.compute_dtype = DType::kBF16;
    const Estimate est = estimate_run(spec);
    const std::string text = estimate_text(est, "test.json");
    for (const char* s : {"Psi",
                          "N = data-parallel ranks",
                          "g = bytes per gradient element",
                          "DDP (14+g)Psi",
                          "ZeRO-1 (2+g)Psi + 12Psi/N",
                          "ZeRO-2 2Psi + (12+g)Psi/N",
                          "ZeRO-3 (14+g)Psi/N",
                          "DDP 16Psi",
                          "ZeRO-1 8Psi + 8Psi/N",
                          "ZeRO-2 4Psi + 12Psi/N",
                          "ZeRO-3 16Psi/N",
                          "this run: ZeRO-2, 2Psi + (12+g)Psi/N",
                          "multiple of N",
                          "params",
                          "grads",
                          "optimizer",
                          "activations",
                          "comm buffers",
                          "workspace",
                          "none",
                          "every",
                          "every_k",
                          "selective"})
        EXPECT_NE(text.find(s), std::string::npos) << s << "\n" << text;
    EXPECT_NE(text.find(group_digits(est.state.padded_numel)), std::string::npos);
}

TEST(EstimateReport, JsonCarriesTheNumbers) {
    EstimateSpec spec;
    spec.model = std::make_shared<GptFamily>(GptOptions{256, 64, 64, 2, 4}, GptDataOptions{});
    spec.state.ranks = 4;
    spec.state.zero_stage = 3;
    spec.state.offload_optimizer = true;
    const Estimate est = estimate_run(spec);
    const nlohmann::json j = nlohmann::json::parse(estimate_json(est, "x.json").dump());
    EXPECT_EQ(j["ranks"], 4);
    EXPECT_EQ(j["zero_stage"], 3);
    EXPECT_EQ(j["param_count"], spec.model->param_count());
    EXPECT_EQ(j["formula"]["text"], "16Psi/N");
    EXPECT_EQ(j["device"]["params"], at(est.device, MemCategory::kParams));
    EXPECT_EQ(j["host"]["optimizer"], at(est.host, MemCategory::kOptimizer));
    EXPECT_EQ(j["device"]["total"], est.device_total);
    EXPECT_EQ(j["activations"]["policies"]["none"]["peak"], est.policies[0].peak);
    EXPECT_GT(j["activations"]["policies"]["none"]["peak"].get<int64_t>(),
              j["activations"]["policies"]["every"]["peak"].get<int64_t>());
}

TEST(EstimateReport, GroupDigits) {
    EXPECT_EQ(group_digits(0), "0");
    EXPECT_EQ(group_digits(999), "999");
    EXPECT_EQ(group_digits(1000), "1,000");
    EXPECT_EQ(group_digits(-1234567), "-1,234,567");
}

}  // namespace zt
