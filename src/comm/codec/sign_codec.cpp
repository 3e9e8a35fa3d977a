// One bit a value (1-bit SGD, Seide et al. 2014; the compressed stage of 1-bit Adam, Tang et al.
// 2021): each block of `block` values travels as one f32 scale, the mean of |x| over the block
// (the scale that minimizes the squared error of s sign(x)), and one sign bit per value (1:
// x >= 0), decoded as +-s. Meant for use with error feedback, which carries the rest. A block
// holding a non-finite value gets a NaN scale. Layout: nb f32 scales, then ceil(n / 8) bytes of
// bits (value i at bit i % 8 of byte i / 8), padded to 4.
#include <algorithm>
#include <cmath>
#include <limits>

#include "comm/codec/codecs.h"

namespace zt::codec_detail {

namespace {

class SignCodec final : public Codec {
  public:
    explicit SignCodec(int64_t block) : block_(block) {}
    CodecKind kind() const override { return CodecKind::kSign; }

    int64_t encoded_bytes(int64_t n) const override {
        return n == 0 ? 0 : pad4(blocks(n) * 4 + (n + 7) / 8);
    }

    void encode(const float* x, int64_t n, uint8_t* out, float* residual) const override {
        float* scales = reinterpret_cast<float*>(out);
        uint8_t* bits = out + blocks(n) * 4;
        std::fill(bits, out + encoded_bytes(n), uint8_t{0});
        for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block_) {
            const int64_t m = std::min(block_, n - lo);
            float sum = 0.0f, probe = 0.0f;
            for (int64_t i = lo; i < lo + m; ++i) {
                sum += std::fabs(x[i]);
                probe += x[i] * 0.0f;
            }
            const float s = probe != 0.0f ? std::numeric_limits<float>::quiet_NaN()
                                          : sum / static_cast<float>(m);
            scales[b] = s;
            for (int64_t i = lo; i < lo + m; ++i) {
                const bool pos = x[i] >= 0.0f;
                bits[i / 8] |= static_cast<uint8_t>(pos ? 1u << (i % 8) : 0u);
                if (residual) residual[i] = x[i] - (pos ? s : -s);
            }
        }
    }

    void decode(const uint8_t* in, int64_t n, float* y) const override {
        std::fill(y, y + n, 0.0f);
        decode_add(in, n, y);
    }

    void decode_add(const uint8_t* in, int64_t n, float* y) const override {
        const float* scales = reinterpret_cast<const float*>(in);
        const uint8_t* bits = in + blocks(n) * 4;
        for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block_) {
            const float s = scales[b];
            for (int64_t i = lo; i < std::min(n, lo + block_); ++i)
                y[i] += (bits[i / 8] >> (i % 8)) & 1 ? s : -s;
        }
    }

  private:
    int64_t blocks(int64_t n) const { return (n + block_ - 1) / block_; }
    int64_t block_;
};

}  // namespace

std::unique_ptr<Codec> make_sign_codec(int64_t block) { return std::make_unique<SignCodec>(block); }

}  // namespace zt::codec_detail
