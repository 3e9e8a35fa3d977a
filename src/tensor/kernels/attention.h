// Causal multi-head self-attention, blockwise with an online softmax (FlashAttention-style): memory
// grows linearly with T; no (B, H, T, T) matrix is ever held; backward recomputes the scores.
// Letters: B batch, T sequence, C model width, H heads, D = C / H head width.
// forward  qkv: (B, T, 3C) with q, k, v in that order along the last dim, head h at columns
//          [h D, h D + D) of each -> out: (B, T, C) (heads concatenated); saves lse: (B, H, T) f32.
//          Scores are scaled by 1/sqrt(D).
// backward dout: (B, T, C) -> dqkv: (B, T, 3C) written (=). Needs qkv, out, lse from forward.
// T is float, bf16 or f16 (storage). Math is f32, except that bf16 tensors may take bf16 dot
// products (AttentionMath). Parallel over (B, H) pairs, each head computed whole
// by one thread, so results are the same bits for any thread count. The kernels run on
// zt::num_threads() threads; pass that count to attention_workspace_bytes.
#pragma once

#include <cstdint>

namespace zt::kernels {

struct AttentionShape {
    int64_t B, T, C, H;
};

// How bf16 attention computes its products (Note [bf16 dot products in attention]): kWidened
// widens the operands to f32 for f32 FMAs; kDot multiplies bf16 operands with AVX512_BF16 dot
// products, the probabilities and score gradients rounded to bf16 first (f32 accumulation);
// kAuto takes kDot where this build has it and the machine's measured GEMM choice runs bf16
// products natively (their bf16 rate beats the f32 one), else kWidened; the environment
// variable ZT_ATTENTION ("dot" or "widened") overrides that choice. f32 and f16 tensors always
// take f32 math.
enum class AttentionMath { kAuto, kWidened, kDot };
// Whether this build has kDot (compiled for AVX512_BF16); kDot without it runs kWidened.
bool attention_dot_available();
// ZT_ATTENTION's value (null or empty: unset) as a choice: kDot, kWidened, or kAuto when unset.
// Throws zt::Error (kInput) for another value, and for "dot" where `dot_available` is false (a
// build without AVX512_BF16 would otherwise run widened products under the name of dot ones).
AttentionMath attention_math_from_env(const char* value, bool dot_available);
// Whether bf16 attention with `math` runs on dot products here (the kAuto choice is made once).
bool attention_uses_dot(AttentionMath math);

// Scratch: the caller passes `workspace` of at least attention_workspace_bytes(s, threads) bytes
// (the kernels allocate nothing themselves, so every byte is tracked by the caller's pool).
int64_t attention_workspace_bytes(AttentionShape s, int threads);

template <typename T>
void attention_forward(const T* qkv, T* out, float* lse, AttentionShape s, void* workspace,
                       AttentionMath math = AttentionMath::kAuto);
template <typename T>
void attention_backward(const T* qkv, const T* out, const T* dout, const float* lse, T* dqkv,
                        AttentionShape s, void* workspace,
                        AttentionMath math = AttentionMath::kAuto);

}  // namespace zt::kernels
