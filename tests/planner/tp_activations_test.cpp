// One tensor-parallel rank's activations (gpt_activation_bytes with t and sp, used by the planner
// and `zerotrain estimate` under parallel.tensor): the bytes a rank saves, against the split's
// tensor-by-tensor account written out here. Sizes are multiples of the pool's 64-byte alignment,
// so no rounding hides a term. Measured peaks: PlanCli.TensorParallelPeaksWithinTolerance.
#include <gtest/gtest.h>

#include "models/gpt/gpt_family.h"
#include "models/gpt/gpt_memory.h"
#include "planner/estimate.h"

namespace zt {
namespace {

GptOptions model(const char* policy) {
    GptOptions o{256, 16, 32, 3, 4};  // V, T, C, L, H
    o.checkpoint_policy = policy;
    return o;
}

TEST(TpActivations, OneRankIsTheUnsplitModel) {
    for (const char* p : {"none", "every", "selective"})
        for (bool peak : {false, true})
            for (bool sp : {false, true})
                EXPECT_EQ(gpt_activation_bytes(model(p), 2, 16, DType::kF32, peak, 1, sp),
                          gpt_activation_bytes(model(p), 2, 16, DType::kF32, peak))
                    << p << peak << sp;
}

TEST(TpActivations, SavedBytesFollowTheSplit) {
    const int64_t B = 2, T = 16, C = 32, V = 256, L = 3, H = 4, t = 2, N = B * T, d = 4;
    const int64_t A = C, F = 4 * C;
    const int64_t a = N * C * d, s = 2 * N * 4, lse = B * H * T * 4, ce = 2 * N * 4, loss = 64;
    // One process: embeddings 3a; a block keeps 6a, y, qkv, 2f, 2 stats, lse; the head keeps
    // ln_f and its stats, the logits, cross-entropy's stats and the loss.
    const int64_t block1 = 6 * a + N * A * d + 3 * N * A * d + 2 * N * F * d + 2 * s + lse;
    const int64_t one = 3 * a + L * block1 + a + s + N * V * d + ce + loss;
    EXPECT_EQ(gpt_activation_bytes(model("none"), B, T, DType::kF32, false), one);
    // tp: the split tensors halve; each row layer keeps its partial product and its sum beside
    // the biased output (2a more each, two per block); the embedding keeps its partial lookup.
    const int64_t blockt =
        6 * a + 4 * a + (N * A * d + 3 * N * A * d + 2 * N * F * d + lse) / t + 2 * s;
    const int64_t tp = 4 * a + L * blockt + a + s + N * V / t * d + ce + loss;
    EXPECT_EQ(gpt_activation_bytes(model("none"), B, T, DType::kF32, false, t, false), tp);
    // sp: the regions' tensors (4 per block, 3 in the row layers, the embedding's 3, ln_f and
    // every layernorm's stats) on N/t rows; each column layer's input gathered whole (2 per
    // block, and the head's).
    const int64_t r = a / t;
    const int64_t blocks = 4 * r + 2 * a + 2 * (a + 2 * r) +
                           (N * A * d + 3 * N * A * d + 2 * N * F * d + lse) / t + 2 * s / t;
    const int64_t sp = a + 3 * r + L * blocks + r + s / t + a + N * V / t * d + ce + loss;
    EXPECT_EQ(gpt_activation_bytes(model("none"), B, T, DType::kF32, false, t, true), sp);
    // Checkpointing every block keeps each block's output only: r.
    EXPECT_EQ(gpt_activation_bytes(model("every"), B, T, DType::kF32, false, t, true),
              a + 3 * r + L * r + r + s / t + a + N * V / t * d + ce + loss);
    // Selective frees qkv, lse and c_attn's gathered input (inside the recompute region).
    EXPECT_EQ(gpt_activation_bytes(model("selective"), B, T, DType::kF32, false, t, true),
              sp - L * (3 * N * A / t * d + lse / t + a));
}

// The estimator (and so the planner) takes a tensor-parallel rank's figures from the family.
TEST(TpActivations, EstimateUsesTheSplitFigures) {
    EstimateSpec spec;
    spec.model = std::make_shared<GptFamily>(model("none"), GptDataOptions{});
    spec.micro_batch = 2;
    spec.tp = 2;
    for (bool sp : {false, true}) {
        spec.sequence_parallel = sp;
        const Estimate e = estimate_run(spec);
        EXPECT_EQ(e.activations.peak,
                  gpt_activation_bytes(model("none"), 2, 16, DType::kF32, true, 2, sp));
    }
}

}  // namespace
}  // namespace zt
