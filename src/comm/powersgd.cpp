#include "comm/powersgd.h"

#include <cmath>
#include <vector>

#include "util/random.h"

namespace zt {

namespace {
constexpr double kDependent = 1e-6;  // remaining norm / norm before projection
}  // namespace

bool powersgd_compresses(int64_t rows, int64_t cols, const PowerSgdOptions& o) {
    if (rows < 2 || cols < 2) return false;
    const double full = static_cast<double>(rows) * static_cast<double>(cols);
    const double factors = static_cast<double>(rows + cols) * o.rank;
    return full >= o.min_compression_rate * factors;
}

void orthonormalize_columns(float* p, int64_t rows, int64_t r) {
    // Column-major scratch in double: Gram-Schmidt walks columns.
    std::vector<double> c(static_cast<size_t>(rows * r));
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < r; ++j) c[static_cast<size_t>(j * rows + i)] = p[i * r + j];
    for (int64_t j = 0; j < r; ++j) {
        double* cj = c.data() + j * rows;
        double before = 0;
        for (int64_t i = 0; i < rows; ++i) before += cj[i] * cj[i];
        for (int64_t k = 0; k < j; ++k) {
            const double* ck = c.data() + k * rows;
            double dot = 0;
            for (int64_t i = 0; i < rows; ++i) dot += ck[i] * cj[i];
            for (int64_t i = 0; i < rows; ++i) cj[i] -= dot * ck[i];
        }
        double norm = 0;
        for (int64_t i = 0; i < rows; ++i) norm += cj[i] * cj[i];
        norm = std::sqrt(norm);
        // Nothing left but rounding (a column dependent on the earlier ones): 0, not noise.
        const bool keep = std::isfinite(norm) && norm > kDependent * std::sqrt(before);
        const double inv = keep ? 1.0 / norm : 0.0;
        for (int64_t i = 0; i < rows; ++i) cj[i] = inv == 0.0 ? 0.0 : cj[i] * inv;
    }
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < r; ++j)
            p[i * r + j] = static_cast<float>(c[static_cast<size_t>(j * rows + i)]);
}

void powersgd_random_q(float* q, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; ++i)
        q[i] = static_cast<float>(normal01(seed, 0x9057, static_cast<uint64_t>(i)));
}

}  // namespace zt
