// 1-bit Adam's momentum exchange (optim/onebit_adam.h): the average over the data-parallel ranks
// of a flat f32 buffer (each rank's local momentum) that travels as a codec's bytes, with error
// feedback on both sides, as DeepSpeed's compressed_allreduce does:
//   1. each rank adds its worker residual to its buffer, encodes it per destination segment and
//      one all-to-all delivers them (comm/compressed.h's reduce-scatter); rank r decodes the R
//      encodings of segment r, sums them in rank order and divides by R;
//   2. rank r adds its server residual to that average, encodes it, and an all-gather gives
//      every rank every segment's encoding; every rank decodes all of them (its own too), so
//      every rank holds the same bits.
// Each residual keeps what its encoding could not carry (v - decode(encode(v))). Segments are
// the buffer cut into R nearly equal parts (any length). The codec is 1-bit (sign times the mean
// |x| of each block of `block` values) for OneBitAdam; any codec works (f32: the plain average).
// The residuals are checkpointed through ResidualState.
#pragma once

#include <cstdint>
#include <memory>

#include "comm/codec/codec.h"
#include "comm/compressed.h"
#include "comm/residual_state.h"

namespace zt {

// OneBitAdam's codec: the sign of each value times the mean |x| of its block of 256.
inline constexpr CodecOptions kOneBitAdamCodec{CodecKind::kSign, 256, 0};

class MomentumExchange final : public ResidualState {
  public:
    // comm: the data-parallel group (more than one rank); numel: the buffer's length.
    MomentumExchange(MemoryPool& pool, Communicator& comm, int64_t numel,
                     const CodecOptions& codec);

    // x (numel values) <- the average over ranks of every rank's x, through the codec. Returns
    // the seconds spent waiting for the two collectives.
    double average(float* x);

    const CompressionStats& stats() const { return exchange_.stats(); }
    int64_t numel() const { return numel_; }

    std::vector<Tensor*> residuals() override { return {&worker_, &server_}; }
    std::string residual_layout() const override;
    void load_residual(size_t i, std::span<const float> data) override;

    // The R nearly equal segments a buffer of numel values is cut into (the planner's too).
    static std::vector<int64_t> segment_counts(int64_t numel, int ranks);

  private:
    MemoryPool& pool_;
    Communicator& comm_;
    int64_t numel_;
    CodecOptions codec_options_;
    std::unique_ptr<Codec> codec_;
    std::vector<int64_t> counts_;
    CompressedExchange exchange_;
    Tensor worker_, server_;  // the residuals: numel values, counts_[rank] values (made on use)
    Tensor segment_;          // this rank's averaged segment
};

}  // namespace zt
