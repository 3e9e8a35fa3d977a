#include "comm/compressed_all_to_all.h"

#include "util/error.h"

namespace zt {

void CompressedAllToAll::run(Communicator* comm, const float* send,
                             const std::vector<int64_t>& send_counts, float* recv,
                             const std::vector<int64_t>& recv_counts, CompressionStats& stats) {
    const int R = comm ? comm->size() : 1;
    const int me = comm ? comm->rank() : 0;
    ZT_ASSERT(send_counts.size() == static_cast<size_t>(R) &&
                  recv_counts.size() == static_cast<size_t>(R),
              "compressed all-to-all: one count per rank");
    std::vector<int64_t> send_enc(static_cast<size_t>(R)), recv_enc(static_cast<size_t>(R));
    int64_t send_total = 0, recv_total = 0;
    for (int r = 0; r < R; ++r) {
        const auto ru = static_cast<size_t>(r);
        send_enc[ru] = codec_.encoded_bytes(send_counts[ru]);
        recv_enc[ru] = codec_.encoded_bytes(recv_counts[ru]);
        send_total += send_enc[ru];
        recv_total += recv_enc[ru];
        if (r != me) {
            stats.raw_bytes += send_counts[ru] * 4;
            stats.wire_bytes += send_enc[ru];
        }
    }
    send_bytes_.resize(static_cast<size_t>(send_total));
    {
        const float* x = send;
        uint8_t* out = send_bytes_.data();
        for (int r = 0; r < R; ++r) {
            const auto ru = static_cast<size_t>(r);
            encode_with_feedback(codec_, x, send_counts[ru], out, nullptr, stats);
            x += send_counts[ru];
            out += send_enc[ru];
        }
    }
    const uint8_t* in = send_bytes_.data();
    if (comm) {
        recv_bytes_.resize(static_cast<size_t>(recv_total));
        comm->all_to_all(send_bytes_.data(), send_enc, recv_bytes_.data(), recv_enc, CommType::kU8)
            ->wait();
        in = recv_bytes_.data();
    } else {
        ZT_ASSERT(send_counts == recv_counts, "compressed all-to-all: a group of one");
    }
    float* y = recv;
    for (int s = 0; s < R; ++s) {
        const auto su = static_cast<size_t>(s);
        if (recv_counts[su] > 0) codec_.decode(in, recv_counts[su], y);
        y += recv_counts[su];
        in += recv_enc[su];
    }
}

}  // namespace zt
