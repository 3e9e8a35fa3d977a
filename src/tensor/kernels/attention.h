// Causal multi-head self-attention, blockwise with an online softmax (FlashAttention-style): memory
// grows linearly with T; no (B, H, T, T) matrix is ever held; backward recomputes the scores.
// Letters: B batch, T sequence, C model width, H heads, D = C / H head width.
// forward  qkv: (B, T, 3C) with q, k, v in that order along the last dim, head h at columns
//          [h D, h D + D) of each -> out: (B, T, C) (heads concatenated); saves lse: (B, H, T) f32.
//          Scores are scaled by 1/sqrt(D).
// backward dout: (B, T, C) -> dqkv: (B, T, 3C) written (=). Needs qkv, out, lse from forward.
// T is float or bf16 (storage); math is f32. Parallel over (B, H) pairs, each head computed whole
// by one thread, so results are the same bits for any thread count. The kernels run on
// zt::num_threads() threads; pass that count to attention_workspace_bytes.
#pragma once

#include <cstdint>

namespace zt::kernels {

struct AttentionShape {
    int64_t B, T, C, H;
};

// Scratch: the caller passes `workspace` of at least attention_workspace_bytes(s, threads) bytes
// (the kernels allocate nothing themselves, so every byte is tracked by the caller's pool).
int64_t attention_workspace_bytes(AttentionShape s, int threads);

template <typename T>
void attention_forward(const T* qkv, T* out, float* lse, AttentionShape s, void* workspace);
template <typename T>
void attention_backward(const T* qkv, const T* out, const T* dout, const float* lse, T* dqkv,
                        AttentionShape s, void* workspace);

}  // namespace zt::kernels
