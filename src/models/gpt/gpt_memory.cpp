// The activation byte model of docs/checkpointing.md, term for term. Sizes in bytes; `a` is one
// (N, C) activation, `d` the dtype's size.
#include "models/gpt/gpt_memory.h"

#include <algorithm>

#include "tensor/kernels/attention.h"
#include "tensor/memory.h"

namespace zt {

namespace {

int64_t pool_bytes(int64_t bytes) {
    const auto align = static_cast<int64_t>(MemoryPool::kAlignment);
    return (std::max<int64_t>(bytes, 1) + align - 1) / align * align;
}

}  // namespace

int64_t gpt_deferred_weight_grad_bytes(const GptOptions& o, int64_t B, DType dtype, int64_t blocks,
                                       bool head, int64_t t) {
    const int64_t N = B * o.seq_len, C = o.d_model, A = o.attn_width() / t, F = o.mlp_width() / t;
    const auto d = static_cast<int64_t>(dtype_size(dtype));
    auto lin = [&](int64_t in, int64_t out) {
        return pool_bytes(N * in * d) + pool_bytes(N * out * d);
    };
    const int64_t block = lin(C, 3 * A) + lin(A, C) + lin(C, F) + lin(F, C);
    return blocks * block + (head ? lin(C, o.vocab_size / t) : 0);
}

BlockMemoryModel gpt_block_memory(const GptOptions& o, int64_t B, int64_t T, DType dtype, int64_t t,
                                  bool sp) {
    const int64_t N = B * T, C = o.d_model, V = o.vocab_size, H = o.n_heads;
    const int64_t A = o.attn_width(), F = o.mlp_width();  // 4C and C for GPT-2
    const auto d = static_cast<int64_t>(dtype_size(dtype));
    const bool split = t > 1;
    sp = sp && split;
    const int64_t Nr = sp ? N / t : N;                  // rows of the regions outside split layers
    const int64_t a = pool_bytes(N * C * d);            // an (N, C) activation
    const int64_t r = pool_bytes(Nr * C * d);           // a region's (N/t under sp, C) activation
    const int64_t y = pool_bytes(N * A / t * d);        // the attention output (N, A/t)
    const int64_t qkv = pool_bytes(N * 3 * A / t * d);  // c_attn output (N, 3A/t)
    const int64_t f = pool_bytes(N * F / t * d);        // c_fc and gelu outputs (N, F/t)
    const int64_t s = pool_bytes(2 * Nr * 4);           // layernorm mean and rstd, f32
    const int64_t lse = pool_bytes(B * H / t * T * 4);  // attention log-sum-exp, f32
    const int64_t logits = pool_bytes(N * V / t * d);   // the rank's vocabulary slice
    const int64_t ce = pool_bytes(2 * N * 4);           // cross-entropy row losses and lse, f32
    const int64_t scalar = pool_bytes(4);               // the loss (and its seed gradient), f32
    // Tensor parallelism (Note [Tensor-parallel regions]): a column layer's input is the
    // region's output itself, or under sp its rows all-gathered into a new (N, C); a row layer
    // keeps its partial product (N, C), the sum (or under sp this rank's rows of it) and the
    // bias added after: three tensors where one process keeps one.
    const int64_t gathered = sp ? a : 0;
    const int64_t row_out = split ? a + 2 * r : a;

    // What a block keeps to the end of the forward. Full: ln_1, attention output, attn.c_proj, h,
    // ln_2, mlp.c_proj, block output (7a), qkv, c_fc and gelu (2f), two layernorm stats, lse.
    const int64_t block_full = 4 * r + 2 * gathered + 2 * row_out + y + qkv + 2 * f + 2 * s + lse;
    // Selective: the region (c_attn and the core) keeps x and y only, c_attn's gathered input too
    // is inside it.
    const int64_t block_selective = block_full - qkv - lse - gathered;
    const int64_t block_region = r;  // a region keeps its output only
    BlockMemoryModel mm;
    // below: embeddings (wte, wpe, their sum; split: wte's partial lookup and its sum or rows).
    mm.below = split ? a + 3 * r : 3 * a;
    // Backward of a block (recomputed or stored, the same tensors are live) peaks in gelu's
    // backward: the block's tensors but its output and mlp.c_proj, the output gradient, the
    // (N, F/t) gradients of gelu's output and input, and the loss the caller holds.
    const int64_t at_gelu = block_full - r - row_out + r + 2 * f + scalar;
    mm.blocks.assign(static_cast<size_t>(o.n_layers),
                     {BlockBytes{block_full, at_gelu},
                      BlockBytes{block_selective, at_gelu - qkv - lse - gathered},
                      BlockBytes{block_region, at_gelu}});
    // Head: ln_f output and stats, (sp: its rows gathered), logits, cross-entropy stats, loss.
    mm.head_saved = r + s + gathered + logits + ce + scalar;
    // Backward of the head: cross-entropy adds dlogits (and the seed); the tied head's linear then
    // adds dx while dlogits is live, after the cross-entropy stats were freed.
    mm.head_peak = std::max(mm.head_saved + scalar + logits, mm.head_saved - ce + logits + a);
    return mm;
}

int64_t gpt_activation_bytes(const GptOptions& o, int64_t B, int64_t T, DType dtype, bool peak,
                             int64_t t, bool sp) {
    validate_checkpointing(o);
    const BlockMemoryModel mm = gpt_block_memory(o, B, T, dtype, t, sp);
    std::vector<BlockRecompute> v(static_cast<size_t>(o.n_layers));
    for (int64_t l = 0; l < o.n_layers; ++l) v[static_cast<size_t>(l)] = block_recompute(o, l);
    return peak ? mm.peak(v) : mm.saved(v);
}

int64_t gpt_param_count(const GptOptions& m, int64_t t) {
    const int64_t C = m.d_model, A = m.attn_width(), F = m.mlp_width();
    // Split over t (parallel/tensor_parallel.h): wte, every block's four weight matrices
    // (4 A C + 2 F C, 12 C^2 for GPT-2) and c_attn's and c_fc's biases (3 A + F, 7 C). Whole:
    // wpe, both c_proj biases and the LayerNorms (2 C + 4 C per block), ln_f.
    return m.vocab_size * C / t + m.seq_len * C +
           m.n_layers * ((4 * A + 2 * F) * C / t + (3 * A + F) / t + 6 * C) + 2 * C;
}

int64_t gpt_transient_workspace_bytes(const GptOptions& m, int64_t B, DType grad_dtype, int threads,
                                      int64_t alignment) {
    const int64_t T = m.seq_len;
    auto r = [&](int64_t bytes) { return (bytes + alignment - 1) / alignment * alignment; };
    const kernels::AttentionShape shape{B, T, m.attn_width(), m.n_heads};
    int64_t bytes = r(kernels::attention_workspace_bytes(shape, std::max(threads, 1)));
    bytes = std::max(bytes, r(B * T * 4));  // cross-entropy backward's dloss: (N) f32
    if (grad_dtype != DType::kF32)          // with_f32_grad's scratch of the largest table
        bytes = std::max(bytes, r(std::max(m.vocab_size, m.seq_len) * m.d_model * 4));
    return bytes;
}

double gpt_flops_per_token(const GptOptions& o) {
    // The attention term 12 L T C counts the attention width A (C for GPT-2).
    const double C = static_cast<double>(o.d_model);
    const double A = static_cast<double>(o.attn_width()), F = static_cast<double>(o.mlp_width());
    const double params =
        static_cast<double>(o.vocab_size + o.seq_len) * C +
        static_cast<double>(o.n_layers) * ((4 * A + 2 * F) * C + 3 * A + F + 6 * C) + 2 * C;
    return 6 * params + 12.0 * o.n_layers * o.seq_len * A;
}

}  // namespace zt
