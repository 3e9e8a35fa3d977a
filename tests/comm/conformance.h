// The comm conformance suite: checks every Communicator backend must pass, written SPMD (every
// rank calls the same check with its own communicator, as an MPI program would). Shared by the
// local backend's gtest (local_comm_test.cpp) and the MPI test program (mpi_conformance_main.cpp).
// Expected values come from the formula of communicator.h: element i of a sum is
// ((x_0 + x_1) + x_2) + ... in rank order, accumulated in f32 (f64 for f64), rounded once; results
// are compared bit for bit. A failed check throws zt::Error naming the rank, op, type and element.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/codec/codec.h"
#include "comm/communicator.h"
#include "comm/compressed_all_to_all.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace zt::conformance {

inline constexpr CommType kAllTypes[] = {CommType::kF32, CommType::kBF16, CommType::kF16,
                                         CommType::kF64, CommType::kI32,  CommType::kI64,
                                         CommType::kU8};
// Sizes that do not divide 2, 3 or 4 ranks or the SIMD width, and one past the reduction's chunk.
inline constexpr int64_t kSizes[] = {0, 1, 5, 67, 2051};

// Input element i of rank r: floats with fraction bits that bf16/f16 sums round differently in
// another order; integers that exercise the high bits of i64.
inline double input_value(CommType t, int rank, int64_t i, int salt) {
    const int64_t h = (i * 7919 + rank * 104729 + salt * 31) % 2003 - 1001;
    switch (t) {
        case CommType::kF32:
        case CommType::kBF16:
        case CommType::kF16:
        case CommType::kF64:
            return static_cast<double>(h) / 64.0 * (1.0 + 0.37 * rank);
        case CommType::kI32:
            return static_cast<double>(h * 1009);
        case CommType::kI64:
            return static_cast<double>(h) * 4.0e12;
        case CommType::kU8:
            return static_cast<double>(h & 0xff);
    }
    return 0;
}

inline void store(CommType t, void* buf, int64_t i, double v) {
    switch (t) {
        case CommType::kF32:
            static_cast<float*>(buf)[i] = static_cast<float>(v);
            break;
        case CommType::kBF16:
            static_cast<bf16*>(buf)[i] = f32_to_bf16(static_cast<float>(v));
            break;
        case CommType::kF16:
            static_cast<f16*>(buf)[i] = f32_to_f16(static_cast<float>(v));
            break;
        case CommType::kF64:
            static_cast<double*>(buf)[i] = v;
            break;
        case CommType::kI32:
            static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
            break;
        case CommType::kI64:
            static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
            break;
        case CommType::kU8:
            static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
            break;
    }
}

inline uint64_t load_bits(CommType t, const void* buf, int64_t i) {
    uint64_t bits = 0;
    const size_t es = comm_type_size(t);
    std::memcpy(&bits, static_cast<const char*>(buf) + static_cast<size_t>(i) * es, es);
    return bits;
}

// The bits of sum over ranks 0..n-1 of input_value(t, r, i, salt) stored in t, by the formula.
// `ranks` maps position in the sum to the rank whose input is used (a sub-group's members).
inline uint64_t expected_sum_bits(CommType t, const std::vector<int>& ranks, int64_t i, int salt) {
    char x[8], out[8] = {};
    switch (t) {
        case CommType::kF32:
        case CommType::kBF16:
        case CommType::kF16: {
            float acc = 0;
            for (size_t k = 0; k < ranks.size(); ++k) {
                store(t, x, 0, input_value(t, ranks[k], i, salt));
                const float v = t == CommType::kF32    ? *reinterpret_cast<float*>(x)
                                : t == CommType::kBF16 ? bf16_to_f32(*reinterpret_cast<bf16*>(x))
                                                       : f16_to_f32(*reinterpret_cast<f16*>(x));
                acc = k == 0 ? v : acc + v;
            }
            store(t, out, 0, acc);
            break;
        }
        case CommType::kF64: {
            double acc = 0;
            for (size_t k = 0; k < ranks.size(); ++k) {
                const double v = input_value(t, ranks[k], i, salt);
                acc = k == 0 ? v : acc + v;
            }
            store(t, out, 0, acc);
            break;
        }
        default: {  // integers wrap
            uint64_t acc = 0;
            for (int r : ranks) {
                store(t, x, 0, input_value(t, r, i, salt));
                acc += load_bits(t, x, 0);
            }
            const size_t es = comm_type_size(t);
            std::memcpy(out, &acc, es);
        }
    }
    return load_bits(t, out, 0);
}

inline std::vector<int> iota_ranks(int n) {
    std::vector<int> r(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) r[static_cast<size_t>(k)] = k;
    return r;
}

// A buffer of n elements of t holding rank's inputs for elements first .. first+n-1.
inline std::vector<char> inputs(CommType t, int rank, int64_t first, int64_t n, int salt) {
    std::vector<char> b(static_cast<size_t>(n) * comm_type_size(t) + 1);
    for (int64_t i = 0; i < n; ++i) store(t, b.data(), i, input_value(t, rank, first + i, salt));
    return b;
}

inline void expect_sum(Communicator& c, const char* op, CommType t, const void* got,
                       const std::vector<int>& ranks, int64_t first, int64_t n, int salt) {
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t want = expected_sum_bits(t, ranks, first + i, salt);
        const uint64_t have = load_bits(t, got, i);
        ZT_CHECK(want == have, "rank ", c.rank(), " of ", c.size(), ": ", op, " ",
                 comm_type_name(t), " element ", first + i, ": bits 0x", std::hex, have,
                 ", expected 0x", want);
    }
}

// Segment sizes that differ by rank, include zeros, and do not divide evenly.
inline std::vector<int64_t> uneven_counts(int n, int64_t base) {
    std::vector<int64_t> c(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) c[static_cast<size_t>(r)] = (r % 3 == 1) ? 0 : base + 3 * r;
    return c;
}

inline int64_t total(const std::vector<int64_t>& c) {
    int64_t s = 0;
    for (auto x : c) s += x;
    return s;
}

inline void check_all_reduce(Communicator& c) {
    const auto ranks = iota_ranks(c.size());
    for (CommType t : kAllTypes) {
        for (int64_t n : kSizes) {
            auto buf = inputs(t, c.rank(), 0, n, 1);
            c.all_reduce(buf.data(), n, t)->wait();
            expect_sum(c, "all_reduce", t, buf.data(), ranks, 0, n, 1);
        }
    }
}

inline void check_reduce_scatter(Communicator& c) {
    const auto ranks = iota_ranks(c.size());
    for (CommType t : kAllTypes) {
        for (int64_t base : {int64_t{0}, int64_t{1}, int64_t{700}}) {
            const auto counts = uneven_counts(c.size(), base);
            int64_t off = 0;
            for (int r = 0; r < c.rank(); ++r) off += counts[static_cast<size_t>(r)];
            const auto send = inputs(t, c.rank(), 0, total(counts), 2);
            std::vector<char> recv(
                static_cast<size_t>(counts[static_cast<size_t>(c.rank())]) * comm_type_size(t) + 1);
            c.reduce_scatter(send.data(), recv.data(), counts, t)->wait();
            expect_sum(c, "reduce_scatter", t, recv.data(), ranks, off,
                       counts[static_cast<size_t>(c.rank())], 2);
        }
    }
}

// Rank r's gathered piece holds input_value(t, r, j, 3) at element j of its piece.
inline void expect_gathered(Communicator& c, const char* op, CommType t, const char* recv,
                            const std::vector<int64_t>& counts) {
    int64_t off = 0;
    for (int q = 0; q < c.size(); ++q) {
        const auto want = inputs(t, q, 0, counts[static_cast<size_t>(q)], 3);
        const size_t nbytes =
            static_cast<size_t>(counts[static_cast<size_t>(q)]) * comm_type_size(t);
        ZT_CHECK(std::memcmp(recv + static_cast<size_t>(off) * comm_type_size(t), want.data(),
                             nbytes) == 0,
                 "rank ", c.rank(), " of ", c.size(), ": ", op, " ", comm_type_name(t),
                 ": segment from rank ", q, " differs");
        off += counts[static_cast<size_t>(q)];
    }
}

inline void check_all_gather(Communicator& c) {
    for (CommType t : kAllTypes) {
        for (int64_t base : {int64_t{0}, int64_t{2}, int64_t{513}}) {
            const auto counts = uneven_counts(c.size(), base);
            const size_t es = comm_type_size(t);
            const auto mine = counts[static_cast<size_t>(c.rank())];
            const auto send = inputs(t, c.rank(), 0, mine, 3);
            std::vector<char> recv(static_cast<size_t>(total(counts)) * es + 1, 0);
            c.all_gather(send.data(), recv.data(), counts, t)->wait();
            expect_gathered(c, "all_gather", t, recv.data(), counts);
            // In place: send is this rank's own segment of recv.
            int64_t off = 0;
            for (int r = 0; r < c.rank(); ++r) off += counts[static_cast<size_t>(r)];
            std::vector<char> buf(recv.size(), 0);
            std::memcpy(buf.data() + off * static_cast<int64_t>(es), send.data(),
                        static_cast<size_t>(mine) * es);
            c.all_gather(buf.data() + off * static_cast<int64_t>(es), buf.data(), counts, t)
                ->wait();
            expect_gathered(c, "all_gather in place", t, buf.data(), counts);
        }
    }
}

// Note [Fixed-order reduction]: all_reduce equals reduce_scatter (over any segmentation) followed
// by all_gather, bit for bit, and a repeated run gives the same bits.
inline void check_all_reduce_matches_rs_ag(Communicator& c) {
    for (CommType t : {CommType::kF32, CommType::kBF16, CommType::kF16, CommType::kF64}) {
        const size_t es = comm_type_size(t);
        const auto counts = uneven_counts(c.size(), 333);
        const int64_t n = total(counts);
        auto ar = inputs(t, c.rank(), 0, n, 4);
        auto ar2 = ar;
        const auto send = ar;
        c.all_reduce(ar.data(), n, t)->wait();
        c.all_reduce(ar2.data(), n, t)->wait();
        ZT_CHECK(ar == ar2, "rank ", c.rank(), ": repeated all_reduce ", comm_type_name(t),
                 " gave other bits");
        std::vector<char> seg(static_cast<size_t>(counts[static_cast<size_t>(c.rank())]) * es + 1);
        std::vector<char> rsag(ar.size(), 0);
        c.reduce_scatter(send.data(), seg.data(), counts, t)->wait();
        c.all_gather(seg.data(), rsag.data(), counts, t)->wait();
        ZT_CHECK(std::memcmp(ar.data(), rsag.data(), static_cast<size_t>(n) * es) == 0, "rank ",
                 c.rank(), ": all_reduce ", comm_type_name(t),
                 " differs from reduce_scatter + all_gather");
    }
}

inline void check_broadcast(Communicator& c) {
    for (CommType t : kAllTypes) {
        for (int root = 0; root < c.size(); ++root) {
            for (int64_t n : {int64_t{0}, int64_t{67}}) {
                auto buf = inputs(t, c.rank(), 0, n, 5);
                c.broadcast(buf.data(), n, t, root)->wait();
                const auto want = inputs(t, root, 0, n, 5);
                ZT_CHECK(buf == want, "rank ", c.rank(), ": broadcast ", comm_type_name(t),
                         " from root ", root, " differs");
            }
        }
    }
}

// all_to_all: rank i sends (i + 2j) % 4 elements to rank j, element k of value
// input_value(t, i, 1000 * j + k, 6).
inline int64_t a2a_count(int from, int to) { return (from + 2 * to) % 4; }

inline void check_all_to_all(Communicator& c) {
    const int n = c.size(), r = c.rank();
    for (CommType t : kAllTypes) {
        const size_t es = comm_type_size(t);
        std::vector<int64_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
        std::vector<char> send, want;
        for (int q = 0; q < n; ++q) {
            sc[static_cast<size_t>(q)] = a2a_count(r, q);
            rc[static_cast<size_t>(q)] = a2a_count(q, r);
            const auto s = inputs(t, r, 1000 * q, a2a_count(r, q), 6);
            send.insert(send.end(), s.begin(), s.end() - 1);
            const auto w = inputs(t, q, 1000 * r, a2a_count(q, r), 6);
            want.insert(want.end(), w.begin(), w.end() - 1);
        }
        send.push_back(0);
        std::vector<char> recv(want.size() + 1, 0);
        c.all_to_all(send.data(), sc, recv.data(), rc, t)->wait();
        ZT_CHECK(want.empty() || std::memcmp(recv.data(), want.data(), want.size()) == 0, "rank ",
                 r, ": all_to_all ", comm_type_name(t), " differs");
        (void)es;
    }
}

// compressed all-to-all (comm/compressed_all_to_all.h): rank i sends ccount(i, j) floats (odd,
// zero for j = 0 from rank 1, one past a codec block) of value input_value(kF32, i, 1000 j + k, 7)
// to rank j. Lossless: the plain all_to_all's bits. Lossy: each segment received is, bit for
// bit, the receiver's own encode-then-decode of what the sender held (decoding is pure), and the
// stats count the encoded bytes of the segments for other ranks.
inline int64_t ccount(int from, int to) {
    return from == 1 && to == 0 ? 0 : 3 + 127 * ((from + 2 * to) % 3);
}

inline void check_compressed_all_to_all(Communicator& c) {
    const int n = c.size(), r = c.rank();
    auto values = [](int from, int to) {
        std::vector<float> v(static_cast<size_t>(ccount(from, to)));
        for (size_t k = 0; k < v.size(); ++k)
            v[k] = static_cast<float>(
                input_value(CommType::kF32, from, 1000 * to + static_cast<int64_t>(k), 7));
        return v;
    };
    for (CodecKind kind : {CodecKind::kF32, CodecKind::kBf16, CodecKind::kF16, CodecKind::kInt8,
                           CodecKind::kInt4, CodecKind::kFp8E4M3, CodecKind::kFp8E5M2}) {
        auto codec = make_codec({kind, 256, 0.01});
        std::vector<int64_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
        std::vector<float> send, want;
        int64_t wire = 0;
        for (int q = 0; q < n; ++q) {
            sc[static_cast<size_t>(q)] = ccount(r, q);
            rc[static_cast<size_t>(q)] = ccount(q, r);
            const auto s = values(r, q);
            send.insert(send.end(), s.begin(), s.end());
            if (q != r) wire += codec->encoded_bytes(ccount(r, q));
            auto w = values(q, r);  // the sender's values, through the codec here
            std::vector<uint8_t> bytes(static_cast<size_t>(codec->encoded_bytes(ccount(q, r))));
            if (!w.empty()) {
                codec->encode(w.data(), ccount(q, r), bytes.data());
                codec->decode(bytes.data(), ccount(q, r), w.data());
            }
            want.insert(want.end(), w.begin(), w.end());
        }
        if (kind == CodecKind::kF32) {  // the plain exchange's bits
            std::vector<float> plain(want.size() + 1);
            c.all_to_all(send.data(), sc, plain.data(), rc, CommType::kF32)->wait();
            ZT_CHECK(std::memcmp(plain.data(), want.data(), want.size() * 4) == 0, "rank ", r,
                     ": plain all_to_all differs from the sent values");
        }
        std::vector<float> got(want.size() + 1, -7.0f);
        CompressedAllToAll a2a(*codec);
        CompressionStats stats;
        a2a.run(&c, send.data(), sc, got.data(), rc, stats);
        ZT_CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0, "rank ", r,
                 ": compressed all_to_all ", codec_kind_name(kind), " differs");
        ZT_CHECK(got[want.size()] == -7.0f, "rank ", r, ": wrote past the receive buffer");
        ZT_CHECK(stats.wire_bytes == wire, "rank ", r, ": ", codec_kind_name(kind), " counted ",
                 stats.wire_bytes, " wire bytes, expected ", wire);
        ZT_CHECK(kind != CodecKind::kF32 || stats.error_sq == 0, "rank ", r,
                 ": the lossless codec has error");
    }
}

// A ring: each rank sends to the next and receives from the previous, receives issued first,
// two tags in flight at once; with one rank it sends to itself.
inline void check_send_recv(Communicator& c) {
    const int n = c.size(), r = c.rank();
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (CommType t : {CommType::kF32, CommType::kBF16, CommType::kI64}) {
        for (int64_t count : {int64_t{0}, int64_t{3001}}) {
            std::vector<char> a(static_cast<size_t>(count) * comm_type_size(t) + 1);
            auto b = a;
            auto ra = c.recv(a.data(), count, t, prev, 7);
            auto rb = c.recv(b.data(), count, t, prev, 8);
            const auto sa = inputs(t, r, 0, count, 7);
            const auto sb = inputs(t, r, 0, count, 8);
            auto hb = c.send(sb.data(), count, t, next, 8);
            auto ha = c.send(sa.data(), count, t, next, 7);
            rb->wait();
            ra->wait();
            ha->wait();
            hb->wait();
            ZT_CHECK(a == inputs(t, prev, 0, count, 7) && b == inputs(t, prev, 0, count, 8),
                     "rank ", r, ": send/recv ", comm_type_name(t), " from rank ", prev,
                     " differs");
        }
    }
}

// Point-to-point ops left in flight while the rank does other work (a pipeline's sends during
// the next micro-batch's compute; the MPI worker then polls them slowly, Note [Idle polling]):
// the receivers post late, the data still arrives, and a receive the caller then needs (need(),
// polled with test(), as the pipeline runner waits) completes.
inline void check_send_recv_in_flight(Communicator& c) {
    const int n = c.size(), r = c.rank();
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    const CommType t = CommType::kF32;
    const int64_t count = 40000;  // past eager sizes: a rendezvous the receiver completes
    const auto out = inputs(t, r, 0, count, 12);
    auto hs = c.send(out.data(), count, t, next, 12);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // "compute"
    std::vector<char> in(static_cast<size_t>(count) * comm_type_size(t) + 1);
    auto hr = c.recv(in.data(), count, t, prev, 12);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    hr->need();
    while (!hr->test()) std::this_thread::yield();
    hr->wait();
    hs->wait();
    ZT_CHECK(in == inputs(t, prev, 0, count, 12), "rank ", r, ": send/recv in flight from rank ",
             prev, " differs");
}

inline void check_barrier(Communicator& c) {
    for (int k = 0; k < 3; ++k) c.barrier()->wait();
}

// split by parity with keys reversing the order, then a reduction over each sub-group in its own
// rank order; then a split of the sub-group (everyone alone).
inline void check_split(Communicator& c) {
    const int n = c.size(), r = c.rank();
    auto sub = c.split(r % 2, -r);
    std::vector<int> members;  // sub-group rank order: descending world rank of same parity
    for (int q = n - 1; q >= 0; --q)
        if (q % 2 == r % 2) members.push_back(q);
    ZT_CHECK(sub && sub->size() == static_cast<int>(members.size()), "rank ", r,
             ": split sub-group size ", sub ? sub->size() : -1, ", expected ", members.size());
    const int want_rank =
        static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin());
    ZT_CHECK(sub->rank() == want_rank, "rank ", r, ": split rank ", sub->rank(), ", expected ",
             want_rank);
    for (CommType t : {CommType::kF32, CommType::kBF16}) {
        auto buf = inputs(t, r, 0, 67, 9);
        sub->all_reduce(buf.data(), 67, t)->wait();
        expect_sum(c, "split all_reduce", t, buf.data(), members, 0, 67, 9);
    }
    auto alone = sub->split(sub->rank(), 0);
    ZT_CHECK(alone->size() == 1 && alone->rank() == 0, "rank ", r, ": split of one");
    auto buf = inputs(CommType::kF32, r, 0, 5, 10);
    alone->all_reduce(buf.data(), 5, CommType::kF32)->wait();
    expect_sum(c, "all_reduce alone", CommType::kF32, buf.data(), {r}, 0, 5, 10);
    c.barrier()->wait();  // the parent still works after the splits
}

// Two ops in flight, waited in reverse order; wait() again and test() after completion.
inline void check_async_overlap(Communicator& c) {
    const auto ranks = iota_ranks(c.size());
    const CommType t = CommType::kF32;
    auto a = inputs(t, c.rank(), 0, 2051, 11);
    const auto counts = uneven_counts(c.size(), 100);
    const auto send = inputs(t, c.rank(), 0, counts[static_cast<size_t>(c.rank())], 3);
    std::vector<char> gathered(static_cast<size_t>(total(counts)) * 4 + 1, 0);
    auto ha = c.all_reduce(a.data(), 2051, t);
    auto hb = c.all_gather(send.data(), gathered.data(), counts, t);
    hb->wait();
    ha->wait();
    ZT_CHECK(ha->test() && hb->test(), "rank ", c.rank(), ": test() false after wait()");
    ha->wait();
    expect_sum(c, "overlapped all_reduce", t, a.data(), ranks, 0, 2051, 11);
    expect_gathered(c, "overlapped all_gather", t, gathered.data(), counts);
}

inline void check_stats(Communicator& c) {
    c.reset_stats();
    const int n = c.size();
    auto buf = inputs(CommType::kF32, c.rank(), 0, 1000, 12);
    c.all_reduce(buf.data(), 1000, CommType::kF32)->wait();
    c.barrier()->wait();
    const CommStats s = c.stats();
    const int ar = static_cast<int>(CollectiveKind::kAllReduce);
    const int64_t seg = 1000 / n + (c.rank() < 1000 % n ? 1 : 0);
    const int64_t want_bytes = 4 * ((1000 - seg) + seg * (n - 1));
    ZT_CHECK(s.count[ar] == 1 && s.bytes_sent[ar] == want_bytes && s.seconds[ar] >= 0 &&
                 s.count[static_cast<int>(CollectiveKind::kBarrier)] == 1 &&
                 s.count[static_cast<int>(CollectiveKind::kAllGather)] == 0,
             "rank ", c.rank(), ": stats count ", s.count[ar], " bytes ", s.bytes_sent[ar],
             ", expected 1 and ", want_bytes);
    c.reset_stats();
    ZT_CHECK(c.stats().count[ar] == 0, "reset_stats left counts");
    // Counted when issued (Note [Counted at issue]): rank 0 reads the stats while its op cannot
    // have completed, the other ranks issuing theirs a while later.
    if (c.rank() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CommHandle h = c.all_reduce(buf.data(), 1000, CommType::kF32);
    const CommStats in_flight = c.stats();
    ZT_CHECK(in_flight.count[ar] == 1 && in_flight.bytes_sent[ar] == want_bytes, "rank ", c.rank(),
             ": an op in flight counts ", in_flight.count[ar], " and ", in_flight.bytes_sent[ar],
             " bytes; expected 1 and ", want_bytes);
    h->wait();
    c.reset_stats();
}

struct Check {
    const char* name;
    void (*fn)(Communicator&);
};

inline const std::vector<Check>& checks() {
    static const std::vector<Check> all = {
        {"all_reduce", check_all_reduce},
        {"reduce_scatter", check_reduce_scatter},
        {"all_gather", check_all_gather},
        {"all_reduce_matches_rs_ag", check_all_reduce_matches_rs_ag},
        {"broadcast", check_broadcast},
        {"all_to_all", check_all_to_all},
        {"compressed_all_to_all", check_compressed_all_to_all},
        {"send_recv", check_send_recv},
        {"send_recv_in_flight", check_send_recv_in_flight},
        {"barrier", check_barrier},
        {"split", check_split},
        {"async_overlap", check_async_overlap},
        {"stats", check_stats},
    };
    return all;
}

}  // namespace zt::conformance
