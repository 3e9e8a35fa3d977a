// Embedding gather and scatter-add (see embedding.h). Ids are checked before any work. The
// backward runs blocks of kBlockCols columns in parallel, each adding rows of dout into dtable in
// order of N, so repeated ids sum in the same order for any thread count.
#include "tensor/kernels/embedding.h"

#include <cstring>

#include "tensor/kernels/vec16.h"
#include "tensor/threads.h"
#include "util/error.h"

namespace zt::kernels {

using namespace vec;

namespace {

constexpr int64_t kParallelMinElems = 1 << 15;  // below this, one thread is faster
constexpr int64_t kBlockCols = 4 * kLanes;

void check_ids(const int32_t* ids, int64_t N, int64_t V) {
    for (int64_t i = 0; i < N; ++i)
        ZT_CHECK(ids[i] >= 0 && ids[i] < V, "embedding: id ", ids[i], " at position ", i,
                 " is out of range [0, ", V, "); ids must be in [0, V) for a table of V = ", V,
                 " rows");
}

}  // namespace

template <typename T>
void embedding_forward(const int32_t* ids, const T* table, T* out, int64_t N, int64_t V,
                       int64_t C) {
    check_ids(ids, N, V);
#pragma omp parallel for schedule(static) if (N * C >= parallel_min_elems(kParallelMinElems))
    for (int64_t i = 0; i < N; ++i)
        std::memcpy(out + i * C, table + static_cast<int64_t>(ids[i]) * C, sizeof(T) * C);
}

template <typename T>
void embedding_backward(const int32_t* ids, const T* dout, float* dtable, int64_t N, int64_t V,
                        int64_t C) {
    check_ids(ids, N, V);
    const int64_t blocks = (C + kBlockCols - 1) / kBlockCols;
#pragma omp parallel for schedule(static) if (N * C >= parallel_min_elems(kParallelMinElems))
    for (int64_t cb = 0; cb < blocks; ++cb) {
        const int64_t c0 = cb * kBlockCols;
        const int64_t c1 = c0 + kBlockCols < C ? c0 + kBlockCols : C;
        for (int64_t i = 0; i < N; ++i) {
            const T* src = dout + i * C;
            float* dst = dtable + static_cast<int64_t>(ids[i]) * C;
            for (int64_t j = c0; j < c1; j += kLanes)
                store_part(dst + j, load_part(dst + j, c1 - j) + load_part(src + j, c1 - j),
                           c1 - j);
        }
    }
}

template void embedding_forward<float>(const int32_t*, const float*, float*, int64_t, int64_t,
                                       int64_t);
template void embedding_forward<bf16>(const int32_t*, const bf16*, bf16*, int64_t, int64_t,
                                      int64_t);
template void embedding_backward<float>(const int32_t*, const float*, float*, int64_t, int64_t,
                                        int64_t);
template void embedding_backward<bf16>(const int32_t*, const bf16*, float*, int64_t, int64_t,
                                       int64_t);
template void embedding_forward<f16>(const int32_t*, const f16*, f16*, int64_t, int64_t,
                                     int64_t);
template void embedding_backward<f16>(const int32_t*, const f16*, float*, int64_t, int64_t,
                                      int64_t);

}  // namespace zt::kernels
