// Top-k sparsification: of n values, the k = ceil(ratio n) largest in magnitude travel as k u32
// indices (ascending) and then their k f32 values; the others decode to zero. Meant for use with
// error feedback (comm/error_feedback.h), which carries what was dropped into the next step.
// Ties in magnitude go to the lower index, and a NaN counts as the largest, so the selection is a
// function of the values alone and an overflow still reaches the loss scaler.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "comm/codec/codecs.h"
#include "util/error.h"

namespace zt::codec_detail {

namespace {

class TopKCodec final : public Codec {
  public:
    explicit TopKCodec(double ratio) : ratio_(ratio) {}
    CodecKind kind() const override { return CodecKind::kTopK; }

    int64_t encoded_bytes(int64_t n) const override { return 8 * kept(n); }

    void encode(const float* x, int64_t n, uint8_t* out, float* residual) const override {
        const int64_t k = kept(n);
        if (k == 0) return;
        ZT_ASSERT(n <= int64_t{UINT32_MAX}, "topk: a segment of ", n, " values (u32 indices)");
        thread_local std::vector<uint32_t> order;
        order.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
        auto mag = [x](uint32_t i) {
            const float a = std::fabs(x[i]);
            return std::isnan(a) ? std::numeric_limits<float>::infinity() : a;
        };
        auto larger = [&](uint32_t a, uint32_t b) {
            const float ma = mag(a), mb = mag(b);
            return ma > mb || (ma == mb && a < b);
        };
        if (k < n) std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
        std::sort(order.begin(), order.begin() + k);
        auto* idx = reinterpret_cast<uint32_t*>(out);
        auto* val = reinterpret_cast<float*>(out + 4 * k);
        for (int64_t j = 0; j < k; ++j) {
            idx[j] = order[static_cast<size_t>(j)];
            val[j] = x[idx[j]];
        }
        if (!residual) return;
        std::copy(x, x + n, residual);  // what was dropped, and nothing of what was kept
        for (int64_t j = 0; j < k; ++j) residual[idx[j]] = 0.0f;
    }

    void decode(const uint8_t* in, int64_t n, float* y) const override {
        std::fill(y, y + n, 0.0f);
        decode_add(in, n, y);
    }

    void decode_add(const uint8_t* in, int64_t n, float* y) const override {
        const int64_t k = kept(n);
        const auto* idx = reinterpret_cast<const uint32_t*>(in);
        const auto* val = reinterpret_cast<const float*>(in + 4 * k);
        for (int64_t j = 0; j < k; ++j) y[idx[j]] += val[j];
    }

  private:
    int64_t kept(int64_t n) const {
        if (n == 0) return 0;
        const auto k = static_cast<int64_t>(std::ceil(ratio_ * static_cast<double>(n)));
        return std::clamp<int64_t>(k, 1, n);
    }

    double ratio_;
};

}  // namespace

std::unique_ptr<Codec> make_topk_codec(double ratio) { return std::make_unique<TopKCodec>(ratio); }

}  // namespace zt::codec_detail
