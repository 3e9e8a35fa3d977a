#include "data/click/zipf.h"

#include <cmath>

#include "util/error.h"

namespace zt {

namespace {

// (e^t - 1) / t and log(1 + t) / t, continuous at t = 0 (the s = 1 limit of H and H^-1).
double expm1_over(double t) { return std::abs(t) > 1e-8 ? std::expm1(t) / t : 1 + t / 2; }
double log1p_over(double t) { return std::abs(t) > 1e-8 ? std::log1p(t) / t : 1 - t / 2; }

}  // namespace

ZipfSampler::ZipfSampler(int64_t n, double s) : n_(n), s_(s) {
    ZT_CHECK(n >= 1, "zipf: need at least one rank, got ", n);
    ZT_CHECK(s > 0 && std::isfinite(s), "zipf: exponent must be positive, got ", s);
    h_integral_x1_ = h_integral(1.5) - 1;  // h(1) = 1
    h_integral_n_ = h_integral(static_cast<double>(n) + 0.5);
    squeeze_ = 2 - h_integral_inverse(h_integral(2.5) - h(2));
}

double ZipfSampler::h(double x) const { return std::exp(-s_ * std::log(x)); }

double ZipfSampler::h_integral(double x) const {
    const double lx = std::log(x);
    return expm1_over((1 - s_) * lx) * lx;
}

double ZipfSampler::h_integral_inverse(double y) const {
    double t = (1 - s_) * y;
    if (t < -1) t = -1;  // rounding at the far end of the range
    return std::exp(log1p_over(t) * y);
}

}  // namespace zt
