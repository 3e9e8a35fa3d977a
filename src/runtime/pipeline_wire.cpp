// Pipeline activations and gradients through a codec (pipeline_wire.h).
#include "runtime/pipeline_wire.h"

#include "util/error.h"

namespace zt {

PipeWire::PipeWire(CodecKind forward, CodecKind backward) : forward_(forward), backward_(backward) {
    if (forward != CodecKind::kF32) fwd_ = make_codec({forward, 256, 0.01});
    if (backward != CodecKind::kF32) bwd_ = make_codec({backward, 256, 0.01});
}

std::shared_ptr<std::vector<uint8_t>> PipeWire::encode(bool activations, const Tensor& t) {
    const Codec* c = codec(activations);
    ZT_ASSERT(c != nullptr, "pipeline wire: encode on a plain direction");
    const int64_t n = t.numel();
    const float* x = nullptr;
    if (t.dtype() == DType::kF32) {
        x = t.data<float>();
    } else {
        scratch_.resize(static_cast<size_t>(n));
        convert(t.raw(), t.dtype(), scratch_.data(), DType::kF32, static_cast<size_t>(n));
        x = scratch_.data();
    }
    auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(c->encoded_bytes(n)));
    encode_with_feedback(*c, x, n, bytes->data(), nullptr, stats_);
    stats_.raw_bytes += n * static_cast<int64_t>(dtype_size(t.dtype()));
    stats_.wire_bytes += static_cast<int64_t>(bytes->size());
    return bytes;
}

void PipeWire::decode(bool activations, const std::vector<uint8_t>& bytes, Tensor& t) {
    const Codec* c = codec(activations);
    ZT_ASSERT(c != nullptr, "pipeline wire: decode on a plain direction");
    const int64_t n = t.numel();
    ZT_ASSERT(static_cast<int64_t>(bytes.size()) == c->encoded_bytes(n),
              "pipeline wire: ", bytes.size(), " bytes for ", n, " values");
    if (n == 0) return;
    if (t.dtype() == DType::kF32) {
        c->decode(bytes.data(), n, t.data<float>());
        return;
    }
    scratch_.resize(static_cast<size_t>(n));
    c->decode(bytes.data(), n, scratch_.data());
    convert(scratch_.data(), DType::kF32, t.raw(), t.dtype(), static_cast<size_t>(n));
}

}  // namespace zt
