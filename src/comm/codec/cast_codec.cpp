// f32 (as is), bf16 and fp16 (rounded to nearest even): 4 or 2 bytes a value, no scale.
#include <algorithm>
#include <cstring>

#include "comm/codec/codecs.h"
#include "tensor/dtype.h"

namespace zt::codec_detail {

namespace {

class CastCodec final : public Codec {
  public:
    explicit CastCodec(CodecKind k)
        : kind_(k),
          dtype_(k == CodecKind::kF32    ? DType::kF32
                 : k == CodecKind::kBf16 ? DType::kBF16
                                         : DType::kF16) {}
    CodecKind kind() const override { return kind_; }
    int64_t encoded_bytes(int64_t n) const override {
        return pad4(n * static_cast<int64_t>(dtype_size(dtype_)));
    }
    void encode(const float* x, int64_t n, uint8_t* out, float* residual) const override {
        convert(x, DType::kF32, out, dtype_, static_cast<size_t>(n));
        if (!residual) return;
        switch (dtype_) {
            case DType::kF32:
                std::fill(residual, residual + n, 0.0f);
                break;
            case DType::kBF16:
                residue(x, reinterpret_cast<const bf16*>(out), n, residual);
                break;
            case DType::kF16:
                residue(x, reinterpret_cast<const f16*>(out), n, residual);
                break;
        }
    }
    void decode(const uint8_t* in, int64_t n, float* y) const override {
        convert(in, dtype_, y, DType::kF32, static_cast<size_t>(n));
    }
    void decode_add(const uint8_t* in, int64_t n, float* y) const override {
        switch (dtype_) {
            case DType::kF32:
                add(reinterpret_cast<const float*>(in), n, y);
                break;
            case DType::kBF16:
                add(reinterpret_cast<const bf16*>(in), n, y);
                break;
            case DType::kF16:
                add(reinterpret_cast<const f16*>(in), n, y);
                break;
        }
    }

  private:
    template <typename T>
    static void residue(const float* x, const T* enc, int64_t n, float* r) {
        for (int64_t i = 0; i < n; ++i) r[i] = x[i] - to_f32(enc[i]);
    }
    template <typename T>
    static void add(const T* in, int64_t n, float* y) {
        for (int64_t i = 0; i < n; ++i) y[i] += to_f32(in[i]);
    }

    CodecKind kind_;
    DType dtype_;
};

}  // namespace

std::unique_ptr<Codec> make_cast_codec(CodecKind k) { return std::make_unique<CastCodec>(k); }

}  // namespace zt::codec_detail
