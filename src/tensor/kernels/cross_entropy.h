// Fused softmax + cross-entropy over rows of logits, never materializing probabilities separately.
// forward  logits: (N, V), targets: (N) int32 -> losses: (N) f32 (-log p[target]);
//          saves lse: (N) f32 (log-sum-exp per row). A target < 0 is ignored (loss 0).
// backward dlogits: (N, V) written (=): dlogits[i] = dloss[i] * (softmax(logits[i]) - onehot),
//          0 for ignored rows. dloss: (N) f32 per-row upstream gradient.
#pragma once

#include <cstdint>

namespace zt::kernels {

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, float* losses, float* lse,
                           int64_t N, int64_t V);
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const float* lse,
                            const float* dloss, T* dlogits, int64_t N, int64_t V);

// The vocabulary-parallel forms (parallel/tensor_parallel.h), each row's logits one slice of V:
// lse: (N) f32, the log-sum-exp of each row of the slice.
template <typename T>
void log_sum_exp_rows(const T* logits, float* lse, int64_t N, int64_t V);
// dlogits[i] = dloss[i] * (exp(logits[i] - lse[i]) - onehot(targets[i])), lse the whole row's;
// targets[i] < 0: the target is outside this slice (no onehot). Ignored rows pass dloss[i] = 0.
template <typename T>
void cross_entropy_backward_slice(const T* logits, const int32_t* targets, const float* lse,
                                  const float* dloss, T* dlogits, int64_t N, int64_t V);

}  // namespace zt::kernels
