// Conformance checks of priority between the transfers of one communicator (Note [Urgent ops],
// comm/communicator.h) and of bulk ops cut into chunks (Note [Chunked ops],
// comm/mpi/mpi_chunks.h), for every backend, SPMD like conformance.h: chunks and urgency never
// change a bit (against the formula and against the whole op); an urgent op issued right after a
// bulk reduction of hundreds of chunks completes first on MPI with 2 ranks or more (the local
// backend runs ops in issue order); a rank that waits for the bulk op before it issues the urgent
// one does not deadlock the others, which started the urgent one beside it.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/conformance.h"

namespace zt::conformance {

// Sets the communicator's chunk size for a scope; back to whole ops (the suite's default) after.
class ChunkScope {
  public:
    ChunkScope(Communicator& c, int64_t bytes) : c_(c) { c_.set_chunk_bytes(bytes); }
    ~ChunkScope() { c_.set_chunk_bytes(0); }
    ChunkScope(const ChunkScope&) = delete;
    ChunkScope& operator=(const ChunkScope&) = delete;

  private:
    Communicator& c_;
};

// 25 f32 or 50 bf16 per chunk: kSizes and uneven_counts cut into uneven pieces, some empty.
inline constexpr int64_t kSmallChunkBytes = 100;
// The bulk reduction the urgent op overtakes: 2^18 f32 (1 MiB) in 4 KiB chunks, 256 of them for
// the reduce-scatter and 256 for the gather, two in flight at a time.
inline constexpr int64_t kBulkElems = int64_t{1} << 18;
inline constexpr int64_t kBulkChunkBytes = 4096;

// Bulk ops (chunk by chunk) and urgent ones (every chunk posted at once): the formula's bits, and
// the bits of the same op unchunked; the stats count the same bytes.
inline void check_chunked_bits(Communicator& c) {
    for (bool urgent : {false, true}) {
        UrgentScope u(&c, urgent);
        {
            ChunkScope chunks(c, kSmallChunkBytes);
            check_all_reduce(c);
            check_reduce_scatter(c);
            check_all_gather(c);
            check_all_reduce_matches_rs_ag(c);
        }
        for (CommType t : {CommType::kF32, CommType::kBF16, CommType::kF64}) {
            const int64_t n = 2051;
            auto whole = inputs(t, c.rank(), 0, n, 13);
            auto chunked = whole;
            c.all_reduce(whole.data(), n, t)->wait();
            ChunkScope chunks(c, kSmallChunkBytes);
            c.all_reduce(chunked.data(), n, t)->wait();
            ZT_CHECK(whole == chunked, "rank ", c.rank(), ": chunked all_reduce ",
                     comm_type_name(t), urgent ? " (urgent)" : "", " differs from the whole one");
        }
    }
    ChunkScope chunks(c, kSmallChunkBytes);
    c.reset_stats();
    const int n = c.size();
    auto buf = inputs(CommType::kF32, c.rank(), 0, 1000, 12);
    c.all_reduce(buf.data(), 1000, CommType::kF32)->wait();
    const int ar = static_cast<int>(CollectiveKind::kAllReduce);
    const int64_t seg = 1000 / n + (c.rank() < 1000 % n ? 1 : 0);
    const int64_t want_bytes = 4 * ((1000 - seg) + seg * (n - 1));
    const CommStats s = c.stats();
    ZT_CHECK(s.count[ar] == 1 && s.bytes_sent[ar] == want_bytes, "rank ", c.rank(),
             ": a chunked all_reduce counts ", s.count[ar], " ops and ", s.bytes_sent[ar],
             " bytes; expected 1 and ", want_bytes);
    c.reset_stats();
}

// An urgent all_gather issued right after a bulk all_reduce of 512 chunks completes while the bulk
// one is still in flight, on every rank. On MPI with 2 ranks or more it starts beside the bulk op
// (or before it, if the worker had not started that yet) and takes a round trip or two; it could
// lose only if a rank stalled between issuing the two for the whole bulk op, so a try where some
// rank saw the bulk op done first is repeated (the ranks agree on it: they must issue the same
// ops), three at most. The local backend runs ops in issue order: it always completes second. One
// MPI rank sends nothing, so there are no chunks: the urgent op goes first or second depending on
// whether the worker had started the bulk one; only the bits are checked.
inline void check_urgent_overtakes_bulk(Communicator& c) {
    const int n = c.size(), r = c.rank();
    const CommType t = CommType::kF32;
    const bool mpi = c.backend() == "mpi", overtakes = mpi && n > 1;
    const auto counts = uneven_counts(n, 5);
    ChunkScope chunks(c, kBulkChunkBytes);
    bool first_everywhere = false;
    for (int attempt = 0; attempt < (overtakes ? 3 : 1) && !first_everywhere; ++attempt) {
        auto bulk = inputs(t, r, 0, kBulkElems, 14);
        const auto send = inputs(t, r, 0, counts[static_cast<size_t>(r)], 3);
        std::vector<char> gathered(static_cast<size_t>(total(counts)) * 4 + 1, 0);
        CommHandle hb = c.all_reduce(bulk.data(), kBulkElems, t);
        CommHandle hu;
        {
            UrgentScope u(&c);
            hu = c.all_gather(send.data(), gathered.data(), counts, t);
        }
        hu->wait();
        int32_t first = hb->test() ? 0 : 1;
        hb->wait();
        expect_sum(c, "bulk all_reduce", t, bulk.data(), iota_ranks(n), 0, kBulkElems, 14);
        expect_gathered(c, "urgent all_gather", t, gathered.data(), counts);
        c.all_reduce(&first, 1, CommType::kI32)->wait();
        first_everywhere = first == n;
    }
    ZT_CHECK(first_everywhere == overtakes || (mpi && n == 1), "rank ", r, " of ", n, " (",
             c.backend(), "): the urgent all_gather ",
             overtakes ? "completed after the bulk all_reduce issued before it, in 3 tries"
                       : "completed before the bulk all_reduce issued before it");
}

// Rank 1 waits for a bulk reduce_scatter before it issues an urgent all_to_all; the other ranks
// issue both and wait for the urgent one first, which they started beside the bulk one. Rank 1
// reaches the urgent op only once the bulk one is done: the others must carry on with the bulk
// op's chunks meanwhile, or no rank finishes.
inline void check_urgent_after_bulk_wait(Communicator& c) {
    const int n = c.size(), r = c.rank();
    const CommType t = CommType::kF32;
    ChunkScope chunks(c, kBulkChunkBytes);
    const auto counts = uneven_counts(n, static_cast<int64_t>(kBulkElems / n));
    int64_t off = 0;
    for (int q = 0; q < r; ++q) off += counts[static_cast<size_t>(q)];
    const auto send = inputs(t, r, 0, total(counts), 2);
    std::vector<char> recv(static_cast<size_t>(counts[static_cast<size_t>(r)]) * 4 + 1);
    CommHandle hb = c.reduce_scatter(send.data(), recv.data(), counts, t);
    if (r == 1) hb->wait();
    std::vector<int64_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
    std::vector<char> a2a_send, want;
    for (int q = 0; q < n; ++q) {
        sc[static_cast<size_t>(q)] = a2a_count(r, q);
        rc[static_cast<size_t>(q)] = a2a_count(q, r);
        const auto s = inputs(t, r, 1000 * q, a2a_count(r, q), 6);
        a2a_send.insert(a2a_send.end(), s.begin(), s.end() - 1);
        const auto w = inputs(t, q, 1000 * r, a2a_count(q, r), 6);
        want.insert(want.end(), w.begin(), w.end() - 1);
    }
    a2a_send.push_back(0);
    std::vector<char> got(want.size() + 1, 0);
    CommHandle hu;
    {
        UrgentScope u(&c);
        hu = c.all_to_all(a2a_send.data(), sc, got.data(), rc, t);
    }
    hu->wait();
    hb->wait();
    expect_sum(c, "bulk reduce_scatter", t, recv.data(), iota_ranks(n), off,
               counts[static_cast<size_t>(r)], 2);
    ZT_CHECK(want.empty() || std::memcmp(got.data(), want.data(), want.size()) == 0, "rank ", r,
             ": urgent all_to_all differs");
}

// Bulk and urgent ops of every kind in flight together, chunked and not, waited for in an order
// that differs by rank, and one that only the even ranks mark urgent (ranks may disagree: the
// messages are the same): every result is the formula's.
inline void check_urgent_and_bulk_mixed(Communicator& c) {
    const int n = c.size(), r = c.rank();
    const CommType t = CommType::kBF16;
    const auto ranks = iota_ranks(n);
    ChunkScope chunks(c, 1000);
    const auto counts = uneven_counts(n, 3001);
    int64_t off = 0;
    for (int q = 0; q < r; ++q) off += counts[static_cast<size_t>(q)];
    const auto rs_send = inputs(t, r, 0, total(counts), 2);
    std::vector<char> rs_recv(static_cast<size_t>(counts[static_cast<size_t>(r)]) * 2 + 1);
    auto ar_big = inputs(t, r, 0, 4099, 1);
    auto ar_small = inputs(t, r, 0, 67, 1);
    const auto ag_send = inputs(t, r, 0, counts[static_cast<size_t>(r)], 3);
    std::vector<char> ag_urgent(static_cast<size_t>(total(counts)) * 2 + 1, 0);
    std::vector<char> ag_bulk(ag_urgent.size(), 0), ag_even(ag_urgent.size(), 0);
    std::vector<CommHandle> hs;
    hs.push_back(c.reduce_scatter(rs_send.data(), rs_recv.data(), counts, t));  // bulk, chunked
    hs.push_back(c.all_reduce(ar_big.data(), 4099, t));                         // bulk, chunked
    {
        UrgentScope u(&c);
        hs.push_back(c.all_gather(ag_send.data(), ag_urgent.data(), counts, t));  // many chunks
        hs.push_back(c.all_reduce(ar_small.data(), 67, t));                       // one chunk
    }
    hs.push_back(c.all_gather(ag_send.data(), ag_bulk.data(), counts, t));  // bulk, chunked
    {
        UrgentScope u(&c, r % 2 == 0);
        hs.push_back(c.all_gather(ag_send.data(), ag_even.data(), counts, t));
    }
    if (r % 2 == 0) std::reverse(hs.begin(), hs.end());
    for (const CommHandle& h : hs) h->wait();
    expect_sum(c, "mixed reduce_scatter", t, rs_recv.data(), ranks, off,
               counts[static_cast<size_t>(r)], 2);
    expect_sum(c, "mixed all_reduce", t, ar_big.data(), ranks, 0, 4099, 1);
    expect_sum(c, "mixed urgent all_reduce", t, ar_small.data(), ranks, 0, 67, 1);
    expect_gathered(c, "mixed urgent all_gather", t, ag_urgent.data(), counts);
    expect_gathered(c, "mixed all_gather", t, ag_bulk.data(), counts);
    expect_gathered(c, "mixed all_gather urgent on even ranks", t, ag_even.data(), counts);
}

inline const std::vector<Check>& priority_checks() {
    static const std::vector<Check> all = {
        {"chunked_bits", check_chunked_bits},
        {"urgent_overtakes_bulk", check_urgent_overtakes_bulk},
        {"urgent_after_bulk_wait", check_urgent_after_bulk_wait},
        {"urgent_and_bulk_mixed", check_urgent_and_bulk_mixed},
    };
    return all;
}

}  // namespace zt::conformance
