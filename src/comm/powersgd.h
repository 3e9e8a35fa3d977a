// PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019): a gradient matrix M (n x m) travels as
// two thin factors, P = M Q (n x r) and then Q' = M^T orth(P) (m x r), each summed over the ranks
// with a plain all-reduce, and is rebuilt as orth(P) Q'^T: (n + m) r numbers instead of n m.
// Q is kept from the previous step (warm start: one power iteration per step refines the
// subspace). What the rank-r sum cannot carry stays in a per-rank error-feedback residual and
// joins the next step's gradient. The pure parts (which matrices, the orthonormalization, the
// initial Q) are here; parallel/powersgd_transport.h runs it on the gradient buckets.
#pragma once

#include <cstdint>

namespace zt {

struct PowerSgdOptions {
    bool enabled = false;
    int rank = 4;                       // r
    bool warm_start = true;             // keep Q between steps, else a fresh one each step
    double min_compression_rate = 2.0;  // a matrix is compressed when n m >= this x (n + m) r
};

// Whether a rows x cols matrix travels as factors (2-D, and worth it by min_compression_rate);
// the rest (vectors, small matrices) travel uncompressed in the same all-reduce as P.
bool powersgd_compresses(int64_t rows, int64_t cols, const PowerSgdOptions& o);

// The columns of p (rows x r, row-major) made orthonormal in place by modified Gram-Schmidt, in
// column order, with double accumulation. A column whose remaining norm is at most 1e-6 of its
// norm before the projection (it depends on the earlier ones), or not finite, is set to 0: it
// then carries nothing, and the rebuilt matrix stays finite.
void orthonormalize_columns(float* p, int64_t rows, int64_t r);

// q[i] <- a standard normal value drawn from (seed, i): the same on every rank.
void powersgd_random_q(float* q, int64_t n, uint64_t seed);

}  // namespace zt
