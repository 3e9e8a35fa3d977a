// Quantization-aware training in the engine (docs/quantization.md) on the local backend: before
// the start step a run is the plain run bit for bit; from it on the Linears train quantized (the
// losses differ from the plain run's); every layout (dp 2 at ZeRO 1 and 3, accumulation) trains
// like one process (the equivalence rule, per-row scales make the quantization layout-free);
// int8, fp8 e4m3 and e5m2 with fp32 and bf16 compute learn; only the targeted Linears quantize.
#include <gtest/gtest.h>

#include <cmath>

#include "comm/local/local_comm.h"
#include "models/gpt/gpt.h"
#include "optim/adamw.h"
#include "runtime/engine.h"
#include "runtime/toy_sequences.h"
#include "tensor/threads.h"

namespace zt {
namespace {

constexpr int64_t kV = 48, kT = 8, kSteps = 10, kMicro = 2;

struct QatSetup {
    int ranks = 1;
    int stage = 0;
    int64_t grad_accum = 2;
    DType compute = DType::kF32;
    QatOptions qat;
};

std::vector<double> train(const QatSetup& s) {
    std::vector<double> losses;
    run_local_ranks(s.ranks, [&](Communicator& c) {
        set_num_threads(1);
        MemoryPool pool;
        EngineOptions eo;
        eo.compute_dtype = s.compute;
        eo.grad_accum = s.grad_accum;
        eo.gradient_clipping = 1.0;
        eo.lr = 3e-3;
        eo.seed = 5;
        eo.optimizer = std::make_unique<AdamW>(AdamWOptions{});
        eo.comm = s.ranks > 1 ? &c : nullptr;
        eo.zero.stage = s.stage;
        eo.zero.reduce_bucket_size = 700;
        eo.quantization = s.qat;
        Engine e(pool, std::make_unique<Gpt>(GptOptions{kV, kT, 16, 2, 2}), std::move(eo));
        std::vector<int32_t> in(kMicro * kT), tg(kMicro * kT);
        for (int64_t step = 0; step < kSteps; ++step) {
            for (int64_t m = 0; m < s.grad_accum; ++m) {
                testing::toy_micro_batch(in, tg, step, m, c.rank(), kMicro, s.grad_accum, s.ranks,
                                         kT, kV);
                e.forward_backward(Batch{in, tg, kMicro, kT});
            }
            const StepStats st = e.step();
            if (c.rank() == 0) losses.push_back(st.loss);
        }
    });
    return losses;
}

QatOptions qat(int64_t start, QuantFormat f = QuantFormat::kInt8) {
    QatOptions q;
    q.enabled = true;
    q.start_step = start;
    q.weight_format = q.input_format = f;
    return q;
}

TEST(Qat, PlainBeforeTheStartStepQuantizedFromIt) {
    QatSetup plain, quant;
    quant.qat = qat(4);
    const std::vector<double> a = train(plain), b = train(quant);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
    for (size_t i = 3; i < a.size(); ++i) EXPECT_NE(a[i], b[i]) << "step " << i + 1;
}

TEST(Qat, EveryLayoutTrainsLikeOneProcess) {
    QatSetup one;
    one.grad_accum = 4;
    one.qat = qat(2);
    const std::vector<double> ref = train(one);
    for (int stage : {1, 3}) {
        QatSetup s;
        s.ranks = 2;
        s.stage = stage;
        s.qat = qat(2);
        const std::vector<double> got = train(s);
        double worst = 0;
        for (size_t i = 0; i < ref.size(); ++i)
            worst = std::max(worst, std::fabs(got[i] - ref[i]) / ref[i]);
        EXPECT_LE(worst, 1e-4) << "stage " << stage;  // DESIGN's fp32 tolerance
    }
}

TEST(Qat, EveryFormatLearnsInFp32AndBf16) {
    for (QuantFormat f : {QuantFormat::kInt8, QuantFormat::kFp8E4M3, QuantFormat::kFp8E5M2})
        for (DType dt : {DType::kF32, DType::kBF16}) {
            QatSetup s;
            s.compute = dt;
            s.qat = qat(1, f);
            const std::vector<double> l = train(s);
            for (double x : l) EXPECT_TRUE(std::isfinite(x));
            EXPECT_LT(l.back(), l.front()) << quant_format_name(f) << " " << dtype_name(dt);
        }
}

TEST(Qat, OnlyTheTargetedLinearsQuantize) {
    MemoryPool pool;
    Gpt g(GptOptions{kV, kT, 16, 2, 2});
    LinearQuant q;
    EXPECT_EQ(attach_linear_quant(g, &q, {"mlp"}), 4);  // c_fc and c_proj of 2 blocks
    EXPECT_EQ(attach_linear_quant(g, &q, {}), 8);
    EXPECT_THROW(attach_linear_quant(g, &q, {"nothing"}), Error);
}

}  // namespace
}  // namespace zt
