// Communication codecs (Note [Compressed collectives], comm/compressed.h): how a segment of n f32
// values travels as bytes. A codec is a strategy type behind this interface; it holds only its
// settings, so one object serves every segment and rank. The error-feedback state a method needs
// lives with the caller (comm/error_feedback.h), one buffer per place it is applied.
// Every encoding of n values has the same size, encoded_bytes(n), a multiple of 4 (segments stay
// aligned in one byte buffer), and decoding is a pure function of the bytes: every rank that
// decodes the same bytes gets the same bits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zt {

enum class CodecKind : uint8_t {
    kF32,   // lossless: the values as they are (checks the compressed path against the plain one)
    kBf16,  // casts, rounded to nearest even
    kF16,
    kInt8,  // blockwise: one f32 scale (max |x| / qmax) per block of `block` values
    kInt4,
    kFp8E4M3,
    kFp8E5M2,
    kTopK,  // the ceil(ratio n) largest |x| as (u32 index, f32 value) pairs, the rest zero
    kSign,  // one bit a value: sign(x) times a per-block scale (mean |x|), "onebit"
};

struct CodecOptions {
    CodecKind kind = CodecKind::kF32;
    int64_t block = 256;  // values per scale (blockwise kinds and onebit)
    double ratio = 0.01;  // kept fraction (top-k)
};

// "f32", "bf16", "fp16", "int8", "int4", "fp8_e4m3", "fp8_e5m2", "topk", "onebit"
CodecKind parse_codec_kind(const std::string& name);
const char* codec_kind_name(CodecKind k);
bool codec_kind_lossless(CodecKind k);

class Codec {
  public:
    virtual ~Codec() = default;
    virtual CodecKind kind() const = 0;
    // Bytes of an encoding of n values (a multiple of 4; 0 for n = 0).
    virtual int64_t encoded_bytes(int64_t n) const = 0;
    // out[0, encoded_bytes(n)) <- x[0, n). When residual is given, residual[i] <- x[i] minus
    // the value decode gives for it (what error feedback carries, and the error metrics).
    virtual void encode(const float* x, int64_t n, uint8_t* out,
                        float* residual = nullptr) const = 0;
    // y[0, n) <- the values `in` encodes
    virtual void decode(const uint8_t* in, int64_t n, float* y) const = 0;
    // y[i] += the value `in` encodes, for i in [0, n): the reduction's step, in one pass
    virtual void decode_add(const uint8_t* in, int64_t n, float* y) const = 0;
};

std::unique_ptr<Codec> make_codec(const CodecOptions& o);

}  // namespace zt
