// Zipf-distributed ranks by rejection-inversion (Hoermann and Derflinger, "Rejection-inversion to
// generate variates from monotone discrete distributions", 1996): P(k) proportional to k^-s for k
// in [1, n], O(1) expected time per draw and O(1) memory for any n, about 1.1 uniforms per draw.
#pragma once

#include <cstdint>

namespace zt {

class ZipfSampler {
  public:
    // n >= 1 ranks, exponent s > 0 (s = 1 allowed).
    ZipfSampler(int64_t n, double s);
    // A rank in [1, n]; `uniform` returns doubles in [0, 1) (called once or a few times).
    template <typename Uniform>
    int64_t sample(Uniform&& uniform) const {
        if (n_ == 1) return 1;
        for (;;) {
            const double u = h_integral_n_ + uniform() * (h_integral_x1_ - h_integral_n_);
            const double x = h_integral_inverse(u);
            int64_t k = static_cast<int64_t>(x + 0.5);
            if (k < 1) k = 1;
            if (k > n_) k = n_;
            // Accept at once inside the squeeze, else compare with the exact area.
            if (static_cast<double>(k) - x <= squeeze_ ||
                u >= h_integral(static_cast<double>(k) + 0.5) - h(static_cast<double>(k)))
                return k;
        }
    }
    int64_t n() const { return n_; }

  private:
    double h(double x) const;                   // x^-s
    double h_integral(double x) const;          // H(x) = (x^(1-s) - 1) / (1 - s), log x at s = 1
    double h_integral_inverse(double y) const;  // H^-1

    int64_t n_;
    double s_;
    double h_integral_x1_ = 0, h_integral_n_ = 0, squeeze_ = 0;
};

}  // namespace zt
