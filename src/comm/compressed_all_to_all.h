// An all-to-all of f32 values that travel as a codec's bytes (codec/codec.h): each segment, the
// one a rank keeps for itself included, is encoded on its own (so any count works, padding is the
// codec's) and decoded by its receiver; decoding is a pure function of the bytes, so the values
// a rank receives do not depend on who else takes part. With the lossless codec (f32) the result
// is the plain all_to_all's, bit for bit. Used by the sharded embeddings' exchanges
// (embedding.comm_precision). No error feedback: the values sent (rows, their gradients) differ
// from step to step in which rows they hold.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/codec/codec.h"
#include "comm/communicator.h"
#include "comm/compressed.h"

namespace zt {

class CompressedAllToAll {
  public:
    explicit CompressedAllToAll(const Codec& codec) : codec_(codec) {}

    // recv[...] <- the decoded segments, recv_counts[s] values from rank s in rank order; send:
    // send_counts[r] values for rank r in rank order. comm: null for a group of one (the segment
    // still makes the round trip through the codec). Adds the bytes of the segments for other
    // ranks (raw: 4 a value) and the encoding error of all segments to stats.
    void run(Communicator* comm, const float* send, const std::vector<int64_t>& send_counts,
             float* recv, const std::vector<int64_t>& recv_counts, CompressionStats& stats);

  private:
    const Codec& codec_;
    std::vector<uint8_t> send_bytes_, recv_bytes_;  // reused across calls
};

}  // namespace zt
