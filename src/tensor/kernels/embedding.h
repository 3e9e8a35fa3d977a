// Embedding gather and scatter-add.
// forward  ids: (N) int32 in [0, V), table: (V, C) -> out: (N, C)
// backward dout: (N, C) -> dtable: (V, C) f32 accumulated (+=); deterministic for any thread count
//          (rows with the same id are added in order of N).
// T is float or bf16. Out-of-range ids are a zt::Error naming the id and V.
#pragma once

#include <cstdint>

namespace zt::kernels {

template <typename T>
void embedding_forward(const int32_t* ids, const T* table, T* out, int64_t N, int64_t V, int64_t C);
template <typename T>
void embedding_backward(const int32_t* ids, const T* dout, float* dtable, int64_t N, int64_t V,
                        int64_t C);

}  // namespace zt::kernels
