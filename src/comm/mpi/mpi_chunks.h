// How the MPI backend cuts a reduction or gather into chunks (Note [Chunked ops]) and how many of
// them it keeps in flight. Pure arithmetic on counts, the same on every rank; internal to
// comm/mpi/.
//
// Note [Chunked ops]
// With set_chunk_bytes(C) > 0, an all_reduce, reduce_scatter or all_gather whose whole vector (N
// elements of E bytes: count, or sum(counts)) is over C bytes moves in K = ceil(N E / C) chunks:
// chunk k holds elements [cut(c, k), cut(c, k + 1)) of every rank's segment (c its count), one
// message per rank pair and chunk (cut further into max_piece_elems pieces, as every message). K
// depends only on N, E, C and the group size, the same on every rank, so the messages are the
// same whatever each rank's schedule:
// - a bulk op keeps kBulkDepth chunks in flight: it posts chunk k + 2 once chunk k has arrived,
//   then sums chunk k while the next two travel (in a third buffer). So the link does not idle
//   between chunks (with one chunk in flight it did, for the round trip of noticing the end of one
//   and posting the next: a 16 MB reduce-scatter in 4 MiB chunks took 104 ms instead of 78 ms on
//   a 1 Gbit/s link between two busy cores), and at most two chunks of it are ahead of an urgent op
//   in MPI's queues and on the link (Note [Urgent ops], comm/communicator.h);
// - an urgent op keeps all its chunks in flight (posts them at once), as an unchunked op does.
// The messages of one op share its tag; MPI's non-overtaking rule matches them in the order they
// were posted, which is chunk order on both sides. Ops in flight together have different tags
// (coll_tag, made from their numbers), so no op's receive matches another op's message. Each
// element is summed in rank order as before, so the bits do not depend on K.
#pragma once

#include <algorithm>
#include <cstdint>

namespace zt::mpi_detail {

struct Chunks {
    static constexpr int64_t kBulkDepth = 2;  // chunks a bulk op keeps in flight

    int64_t count = 1;  // K: chunks of the op's vector
    int64_t depth = 1;  // chunks in flight at most: kBulkDepth for a bulk op, K for an urgent one

    // K for a vector of `elems` elements of `elem_bytes` each, cut every `chunk_bytes` (0: never).
    static Chunks of(int64_t elems, int64_t elem_bytes, int64_t chunk_bytes, bool urgent) {
        Chunks ch;
        const int64_t bytes = elems * elem_bytes;
        if (chunk_bytes > 0 && bytes > chunk_bytes)
            ch.count = std::min(elems, (bytes + chunk_bytes - 1) / chunk_bytes);
        ch.depth = urgent ? ch.count : std::min(ch.count, kBulkDepth);
        return ch;
    }
    // Whether the op moves part by part (an urgent op may start beside it).
    bool streamed() const { return depth < count; }
    // Where chunk k starts in a segment of c elements: floor(c k / K), without overflow.
    int64_t cut(int64_t c, int64_t k) const { return c / count * k + c % count * k / count; }
};

}  // namespace zt::mpi_detail
