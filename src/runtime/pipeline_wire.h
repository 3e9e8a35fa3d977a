// PipeWire: how a pipeline stage's activations (sent forward) and input gradients (sent backward)
// travel (parallel.pipeline.comm_precision, docs/compression.md). With the f32 codec a direction
// is plain (the tensor's own bytes, as before: bit for bit the uncompressed run); otherwise the
// tensor (in the compute dtype) is widened to f32, encoded by the direction's codec (codec.h)
// into a byte buffer that the send keeps alive, and the receiver decodes it and narrows it to
// the compute dtype. Decoding is a pure function of the bytes, so threads and MPI give the same
// bits. No error feedback: each message is a different micro-batch's tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/codec/codec.h"
#include "comm/compressed.h"
#include "tensor/tensor.h"

namespace zt {

class PipeWire {
  public:
    PipeWire(CodecKind forward, CodecKind backward);

    // Whether the direction (activations: forward) travels as codec bytes.
    bool compressed(bool activations) const { return codec(activations) != nullptr; }
    // Bytes of the encoding of n values in the direction.
    int64_t encoded_bytes(bool activations, int64_t n) const {
        return codec(activations)->encoded_bytes(n);
    }
    // t's values encoded (their bytes, the error added to stats()).
    std::shared_ptr<std::vector<uint8_t>> encode(bool activations, const Tensor& t);
    // t <- the values of `bytes` (t's numel of them), in t's dtype.
    void decode(bool activations, const std::vector<uint8_t>& bytes, Tensor& t);

    // Since the last reset: what the plain sends would have carried (the tensors' own bytes),
    // what was sent, and the encoding error.
    const CompressionStats& stats() const { return stats_; }
    void reset_stats() { stats_ = {}; }
    void stats_add(const CompressionStats& s) { stats_.add(s); }
    CodecKind kind(bool activations) const { return activations ? forward_ : backward_; }

  private:
    const Codec* codec(bool activations) const { return activations ? fwd_.get() : bwd_.get(); }
    CodecKind forward_, backward_;
    std::unique_ptr<Codec> fwd_, bwd_;  // null: plain
    std::vector<float> scratch_;        // f32 values of a non-f32 tensor
    CompressionStats stats_;
};

}  // namespace zt
