// Blockwise quantization: each block of `block` values gets one f32 scale s = max|x| / qmax and
// each value the nearest code of the format times s (round to nearest even, as fake_quant.h):
//   int8  [-127, 127], one byte a value        int4  [-7, 7], two values a byte (low nibble first)
//   fp8   e4m3 or e5m2 (fake_quant.h's codes), one byte a value
// Layout of n values in nb = ceil(n / block) blocks: nb f32 scales, then the codes, padded to 4.
// Any n: the last block is short. A block holding a non-finite value gets a NaN scale, so it
// decodes to NaN and an overflow still reaches the loss scaler; a block of zeros gets scale 0.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "comm/codec/codecs.h"
#include "tensor/kernels/fake_quant.h"

namespace zt::codec_detail {

namespace {

class BlockCodec final : public Codec {
  public:
    BlockCodec(CodecKind k, int64_t block) : kind_(k), block_(block) {
        if (k == CodecKind::kFp8E4M3 || k == CodecKind::kFp8E5M2) {
            format_ = k == CodecKind::kFp8E4M3 ? QuantFormat::kFp8E4M3 : QuantFormat::kFp8E5M2;
            for (int c = 0; c < 256; ++c)
                lut_[static_cast<size_t>(c)] = quant_decode(static_cast<uint8_t>(c), format_);
        }
        if (format_ != QuantFormat::kInt8) {
            const int mant = format_ == QuantFormat::kFp8E4M3 ? 3 : 2;
            const int bias = format_ == QuantFormat::kFp8E4M3 ? 7 : 15;
            min_normal_ = std::ldexp(1.0f, 1 - bias);
            sub_inv_ = std::ldexp(1.0f, bias - 1 + mant);
        }
        qmax_ = k == CodecKind::kInt8   ? 127.0f
                : k == CodecKind::kInt4 ? 7.0f
                                        : quant_format_max(format_);
    }
    CodecKind kind() const override { return kind_; }

    int64_t encoded_bytes(int64_t n) const override {
        if (n == 0) return 0;
        return pad4(blocks(n) * 4 + code_bytes(n));
    }

    void encode(const float* x, int64_t n, uint8_t* out, float* residual) const override {
        float* scales = reinterpret_cast<float*>(out);
        uint8_t* codes = out + blocks(n) * 4;
        std::fill(codes, out + encoded_bytes(n), uint8_t{0});
        for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block_) {
            const int64_t m = std::min(block_, n - lo);
            const float* xb = x + lo;
            float amax = 0.0f, probe = 0.0f;  // probe: NaN when the block holds inf or NaN
            for (int64_t i = 0; i < m; ++i) {
                amax = std::max(amax, std::fabs(xb[i]));
                probe += xb[i] * 0.0f;
            }
            float* rb = residual ? residual + lo : nullptr;
            if (probe != 0.0f || amax == 0.0f) {  // NaN scale; or zeros, exactly
                scales[b] = probe != 0.0f ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
                if (rb) std::copy(xb, xb + m, rb);  // none of it was carried
                continue;
            }
            scales[b] = amax / qmax_;
            encode_block(xb, m, qmax_ / amax, scales[b], codes, lo, rb);
        }
    }

    void decode(const uint8_t* in, int64_t n, float* y) const override {
        std::fill(y, y + n, 0.0f);
        decode_add(in, n, y);
    }

    void decode_add(const uint8_t* in, int64_t n, float* y) const override {
        const float* scales = reinterpret_cast<const float*>(in);
        const uint8_t* codes = in + blocks(n) * 4;
        for (int64_t b = 0, lo = 0; lo < n; ++b, lo += block_) {
            const int64_t m = std::min(block_, n - lo);
            const float s = scales[b];
            float* yb = y + lo;
            switch (kind_) {
                case CodecKind::kInt8: {
                    const int8_t* c = reinterpret_cast<const int8_t*>(codes) + lo;
                    for (int64_t i = 0; i < m; ++i) yb[i] += static_cast<float>(c[i]) * s;
                    break;
                }
                case CodecKind::kInt4:
                    for (int64_t i = 0; i < m; ++i)
                        yb[i] += static_cast<float>(nibble(codes, lo + i)) * s;
                    break;
                default: {
                    const uint8_t* c = codes + lo;
                    for (int64_t i = 0; i < m; ++i) yb[i] += lut_[c[i]] * s;
                }
            }
        }
    }

  private:
    int64_t blocks(int64_t n) const { return (n + block_ - 1) / block_; }
    int64_t code_bytes(int64_t n) const { return kind_ == CodecKind::kInt4 ? (n + 1) / 2 : n; }

    static int nibble(const uint8_t* codes, int64_t i) {
        const int v = (codes[i / 2] >> ((i % 2) * 4)) & 0xf;
        return v >= 8 ? v - 16 : v;  // two's complement in 4 bits
    }

    // Codes of x[0, m) (global offset lo) scaled by inv = qmax / max|x|; r (when given) gets
    // x minus the decoded value (code x s).
    void encode_block(const float* x, int64_t m, float inv, float s, uint8_t* codes, int64_t lo,
                      float* r) const {
        switch (kind_) {
            case CodecKind::kInt8: {
                int8_t* c = reinterpret_cast<int8_t*>(codes) + lo;
                for (int64_t i = 0; i < m; ++i) {
                    const float q = std::clamp(std::nearbyint(x[i] * inv), -qmax_, qmax_);
                    c[i] = static_cast<int8_t>(q);
                    if (r) r[i] = x[i] - q * s;
                }
                break;
            }
            case CodecKind::kInt4:
                for (int64_t i = 0; i < m; ++i) {
                    const float q = std::clamp(std::nearbyint(x[i] * inv), -qmax_, qmax_);
                    const int64_t j = lo + i;
                    codes[j / 2] |=
                        static_cast<uint8_t>((static_cast<int>(q) & 0xf) << ((j % 2) * 4));
                    if (r) r[i] = x[i] - q * s;
                }
                break;
            default: {
                uint8_t* c = codes + lo;
                for (int64_t i = 0; i < m; ++i) {
                    c[i] = fp8_code(x[i] * inv);
                    if (r) r[i] = x[i] - lut_[c[i]] * s;
                }
            }
        }
    }

    // The fp8 code of v (in units of the scale, not NaN): quant_encode(quant_round(v)) of
    // fake_quant.h, on the f32 bits with no library call: the mantissa rounded to nearest even
    // in the normal range (a carry is the next binade), multiples of the smallest subnormal
    // below it, saturated at qmax.
    uint8_t fp8_code(float v) const {
        const int mant = format_ == QuantFormat::kFp8E4M3 ? 3 : 2;
        const int bias = format_ == QuantFormat::kFp8E4M3 ? 7 : 15;
        const uint8_t max_code = format_ == QuantFormat::kFp8E4M3 ? 0x7e : 0x7b;
        uint32_t u;
        std::memcpy(&u, &v, 4);
        const auto sign = static_cast<uint8_t>((u >> 24) & 0x80);
        u &= 0x7fffffffu;
        float a;
        std::memcpy(&a, &u, 4);
        if (!(a < qmax_)) return sign | max_code;
        if (a < min_normal_)  // subnormal step 2^(1 - bias - mant); a carry is the first normal
            return static_cast<uint8_t>(sign | static_cast<int>(std::nearbyint(a * sub_inv_)));
        const int drop = 23 - mant;
        u += ((uint32_t{1} << (drop - 1)) - 1) + ((u >> drop) & 1);
        const int field = static_cast<int>(u >> 23) - 127 + bias;
        const auto m = static_cast<int>((u >> drop) & ((1u << mant) - 1));
        return static_cast<uint8_t>(sign | std::min<int>((field << mant) | m, max_code));
    }

    CodecKind kind_;
    int64_t block_;
    float qmax_ = 0;
    float min_normal_ = 0, sub_inv_ = 0;  // fp8: the smallest normal, 1 / the subnormal step
    QuantFormat format_ = QuantFormat::kInt8;
    std::array<float, 256> lut_{};  // fp8: code -> value in units of the scale
};

}  // namespace

std::unique_ptr<Codec> make_block_codec(CodecKind k, int64_t block) {
    return std::make_unique<BlockCodec>(k, block);
}

}  // namespace zt::codec_detail
