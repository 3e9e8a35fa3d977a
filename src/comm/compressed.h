// Compressed collectives: a reduce-scatter and an all-gather of f32 values that travel as a
// codec's bytes (codec/codec.h). Note [Compressed collectives]:
// - reduce-scatter: each rank encodes its segment for rank r (error feedback first, when given)
//   and one all-to-all of bytes delivers them; rank r decodes the R encodings of its segment and
//   sums them in rank order in f32, the fixed order of communicator.h. With the lossless codec
//   (f32) the result is the plain reduce_scatter's, bit for bit.
// - all-gather (the second half of an all-reduce): each rank encodes its reduced segment (with
//   the server-side error feedback, when given) and an all-gather of bytes gives every rank every
//   encoding; each rank decodes them all, its own included, so every rank holds the same bits.
// Counts are per rank in values, as in communicator.h; any counts (zero, uneven, odd) work.
// Each exchange is asynchronous like the plain ops: start_* encodes and issues the collective,
// the caller waits for the handle (counting the wait as exposed), finish_* decodes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "comm/codec/codec.h"
#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace zt {

// Bytes and error of what went through compressed collectives.
struct CompressionStats {
    int64_t raw_bytes = 0;   // what the plain collective would have sent, in raw_dtype_bytes units
    int64_t wire_bytes = 0;  // what was sent
    double error_sq = 0;     // sum over encoded values of (decoded - input)^2
    double input_sq = 0;     // sum of input^2 (input: the values after error feedback's add)
    void add(const CompressionStats& o);
    CompressionStats minus(const CompressionStats& before) const;
};

// The metrics entry of what went through a codec (docs/compression.md), added to j: raw_bytes,
// wire_bytes, their ratio (when anything was sent) and relative_error, sqrt(sum (decoded -
// input)^2 / sum input^2) (when anything was encoded).
nlohmann::json& add_compression_json(nlohmann::json& j, const CompressionStats& s);

// Error feedback (Seide et al. 2014; Karimireddy et al. 2019): the residual e of the values a
// codec could not carry joins the next values sent from the same place: v = x + e;
// out = encode(v); e = v - decode(out). The residual buffers belong to the caller (one per place,
// grad_transport.h).
// Encodes x[0, n) into out (codec.encoded_bytes(n) bytes), with error feedback when ef is given
// (ef: n values), and adds the encoding's error to stats.
void encode_with_feedback(const Codec& codec, const float* x, int64_t n, uint8_t* out, float* ef,
                          CompressionStats& stats);

class CompressedExchange {
  public:
    // raw_type: the type the plain collective would have sent (for CompressionStats.raw_bytes).
    CompressedExchange(MemoryPool& pool, Communicator& comm, const Codec& codec,
                       std::vector<int64_t> counts, CommType raw_type);

    // x: sum(counts) values; ef: null or sum(counts) values (the worker's residual).
    CommHandle start_reduce_scatter(const float* x, float* ef);
    // out: counts[rank] values, the sum over ranks of the decoded segments, in rank order.
    void finish_reduce_scatter(float* out);
    // mine: counts[rank] values; ef: null or counts[rank] values (the server's residual).
    CommHandle start_all_gather(const float* mine, float* ef);
    // y: sum(counts) values, every rank's decoded segment (this rank's too).
    void finish_all_gather(float* y);

    const CompressionStats& stats() const { return stats_; }

  private:
    uint8_t* bytes(Tensor& t) { return static_cast<uint8_t*>(t.raw()); }
    Tensor byte_buffer(int64_t bytes);

    MemoryPool& pool_;
    Communicator& comm_;
    const Codec& codec_;
    std::vector<int64_t> counts_, offsets_;  // values per rank, and where each segment starts
    std::vector<int64_t> enc_;               // encoded bytes per segment
    int64_t raw_size_;
    Tensor send_, recv_;  // encoded bytes in flight
    CompressionStats stats_;
};

}  // namespace zt
