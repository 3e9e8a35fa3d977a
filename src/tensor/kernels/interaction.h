// DLRM dot interaction (facebookresearch/dlrm's "dot" with its li/lj pair order).
// forward  x: (B, D), embs: K pointers to (B, D) -> out: (B, D + P): out[b] = [x[b], Z[i][j] for
//          i in 0..K, j in 0..i-1 (0..i when self)] with T = [x, embs...]: (K + 1, D) per sample
//          and Z = T T^T. P = dot_interaction_pairs(K, self).
// backward dout: (B, D + P) -> dx = dout[:, :D] + dT[0], dembs[k] = dT[k + 1] (written, =), where
//          dT = (G + G^T) T and G holds dout's pair part at (i, j).
// T is float, bf16 or f16; products and sums are in f32, outputs rounded once. Samples run in
// parallel, each by one thread, so the bits do not depend on the thread count.
#pragma once

#include <cstdint>

namespace zt::kernels {

inline int64_t dot_interaction_pairs(int64_t K, bool self) {
    return self ? (K + 1) * (K + 2) / 2 : K * (K + 1) / 2;
}

template <typename T>
void dot_interaction_forward(const T* x, const T* const* embs, int64_t K, int64_t B, int64_t D,
                             bool self, T* out);
template <typename T>
void dot_interaction_backward(const T* x, const T* const* embs, const T* dout, int64_t K, int64_t B,
                              int64_t D, bool self, T* dx, T* const* dembs);

}  // namespace zt::kernels
