// FLOPs of GPT's modules for the FLOPs profiler (runtime/profiler/flops_profiler.h).
//
// Note [Counting FLOPs]
// A multiply-add is 2 FLOPs. Per forward call over N = B T tokens (B sequences of T tokens):
// Linear(in, out): 2 N in out + N out (bias); TiedHead: 2 N C V; the attention core of
// CausalSelfAttention: 4 N T C (scores q k^T and the weighted sum of v, counted over all T x T
// pairs as the MFU formula counts them, though the causal kernel skips the upper half) plus
// 5 B H T^2 for scaling and softmax; LayerNorm: 5 N C (DeepSpeed's count); GELU in Mlp: N 4C;
// Block: 2 N C (the residual adds); the root module: N C (token plus position embedding).
// Embedding lookups count 0; modules of other types count 0 (their children still count).
#include "models/gpt/gpt_family.h"

namespace zt {

double GptFamily::module_flops(const Module& m, int64_t batch, bool root) const {
    const double B = static_cast<double>(batch), T = static_cast<double>(model_.seq_len);
    const double N = B * T;
    if (const auto* l = dynamic_cast<const Linear*>(&m)) {
        const double out = static_cast<double>(l->weight.shape[0]);
        const double in = static_cast<double>(l->weight.shape[1]);
        return 2 * N * in * out + (l->bias ? N * out : 0);
    }
    if (const auto* h = dynamic_cast<const TiedHead*>(&m)) {
        const double V = static_cast<double>(h->weight.shape[0]);
        const double C = static_cast<double>(h->weight.shape[1]);
        return 2 * N * C * V;
    }
    if (const auto* a = dynamic_cast<const CausalSelfAttention*>(&m)) {
        const double C = static_cast<double>(a->c_attn.weight.shape[0] / 3);  // this rank's
        const double H = static_cast<double>(a->n_heads);
        return 4 * N * T * C + 5 * B * H * T * T;
    }
    if (const auto* ln = dynamic_cast<const LayerNorm*>(&m))
        return 5 * N * static_cast<double>(ln->weight.shape[0]);
    if (const auto* mlp = dynamic_cast<const Mlp*>(&m))
        return N * static_cast<double>(mlp->c_fc.weight.shape[0]);  // GELU over (N, 4C)
    if (const auto* b = dynamic_cast<const Block*>(&m))
        return 2 * N * static_cast<double>(b->ln_1.weight.shape[0]);
    if (const auto* g = dynamic_cast<const Gpt*>(&m); g && root)
        return N * static_cast<double>(g->options().d_model);
    return 0;
}

// Note [GPT products by shape]
// The products of one micro-batch of B sequences on a rank of a tensor-parallel group of t, as
// planner/shape_times.h times them (a Linear's forward, input gradient and weight gradient): per
// block c_attn (B T, 3 A / t, C), attn.c_proj (B T, C, A / t), c_fc (B T, F / t, C) and
// mlp.c_proj (B T, C, F / t), and the tied head (B T, V / t, C) once. Their FLOPs are the
// products' part of flops_per_sample (the rest: biases, LayerNorm, GELU, the attention core).
// One rate per size class put GPT config S at 1.35 s a step on one thread where it ran 1.54 s
// (the lanes' rates differ by up to 1.5x at one shape; docs/benchmarks-planner.md).
std::vector<GemmShape> GptFamily::gemm_shapes(int64_t B, int t) const {
    const int64_t N = B * model_.seq_len, C = model_.d_model, L = model_.n_layers;
    const int64_t A = model_.attn_width(), F = model_.mlp_width(), tt = std::max(1, t);
    return {{N, 3 * A / tt, C, L},
            {N, C, A / tt, L},
            {N, F / tt, C, L},
            {N, C, F / tt, L},
            {N, model_.vocab_size / tt, C, 1}};
}

}  // namespace zt
