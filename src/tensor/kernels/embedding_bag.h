// EmbeddingBag: pooled gathers of table rows, the DLRM sparse-feature lookup.
// forward  table: (R, D), ids: (nnz) int32 in [0, R), offsets: (B + 1) int64 (bag b is
//          ids[offsets[b], offsets[b + 1])), weights: (nnz) f32 or null -> out: (B, D);
//          out[b] = scale_b * sum_p w_p table[ids[p]] with scale_b = 1 / count for mean, else 1.
//          An empty bag gives zeros. Sums are in f32 for every storage type.
// backward dout: (B, D) -> dtable: (R, D) f32 accumulated (+=), only rows named in ids; each row
//          sums its contributions in order of position, so the bits do not depend on the threads.
// T is float, bf16 or f16. embedding_bag_check throws zt::Error naming a bad id or offset.
#pragma once

#include <cstdint>

namespace zt::kernels {

enum class BagMode { kSum, kMean };

// Checks offsets[0] == 0, nondecreasing, offsets[B] == nnz, and every id in [0, R).
void embedding_bag_check(const int32_t* ids, int64_t nnz, const int64_t* offsets, int64_t B,
                         int64_t R);

template <typename T>
void embedding_bag_forward(const T* table, const int32_t* ids, int64_t nnz, const int64_t* offsets,
                           const float* weights, BagMode mode, T* out, int64_t B, int64_t R,
                           int64_t D);
template <typename T>
void embedding_bag_backward(const T* dout, const int32_t* ids, int64_t nnz, const int64_t* offsets,
                            const float* weights, BagMode mode, float* dtable, int64_t B, int64_t R,
                            int64_t D);

}  // namespace zt::kernels
