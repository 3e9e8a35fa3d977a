// How each MPI collective is built (mpi_comm_impl.h): phases of nonblocking requests, bulk ones
// in chunks (Note [Chunked ops], mpi_chunks.h), point-to-point ops, barrier and split.
#include "comm/mpi/mpi_comm_impl.h"

namespace zt::mpi_impl {

Chunks MpiComm::chunks_for(Op& op, int64_t elems, CommType t) const {
    op.urgent = urgent_;
    const Chunks ch = size_ == 1 ? Chunks{}
                                 : Chunks::of(elems, static_cast<int64_t>(comm_type_size(t)),
                                              chunk_bytes_, op.urgent);
    op.streamed = ch.streamed();
    return ch;
}

void MpiComm::add_reduce_scatter_phases(Op& op, const void* send, void* recv,
                                        std::vector<int64_t> counts, CommType t, const Chunks& ch) {
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    auto off = std::make_shared<const std::vector<int64_t>>(comm_detail::segment_offsets(counts));
    auto cnt = std::make_shared<const std::vector<int64_t>>(std::move(counts));
    const int64_t mine = (*cnt)[static_cast<size_t>(r)];
    // The other ranks' contributions to chunk k of this rank's segment arrive in tmp[k % (depth +
    // 1)] (block q, of the chunk's length: rank q's; this rank's own block unused), one buffer per
    // chunk in flight and one for the chunk being summed (Note [Chunked ops]).
    auto tmp = std::make_shared<std::vector<std::vector<char>>>(static_cast<size_t>(ch.depth + 1));
    auto buf = [tmp, ch](int64_t k) -> std::vector<char>& {
        return (*tmp)[static_cast<size_t>(k % (ch.depth + 1))];
    };
    auto stream = std::make_shared<Stream>();
    stream->chunks = ch;
    stream->post = [=, this](int64_t k, std::vector<MPI_Request>& reqs) {
        const int64_t len = ch.cut(mine, k + 1) - ch.cut(mine, k);
        std::vector<char>& b = buf(k);
        b.resize(static_cast<size_t>(len) * es * static_cast<size_t>(n));
        auto g = mpi_detail::lock();
        for (int q = 0; q < n; ++q) {
            if (q != r) irecv(bytes(b.data(), len * q, es), len, t, q, coll_tag_, coll_, reqs);
        }
        for (int i = 1; i < n; ++i) {  // staggered: rank r sends to r+1 first, spreading load
            const int q = (r + i) % n;
            const int64_t c = (*cnt)[static_cast<size_t>(q)];
            isend(cbytes(send, (*off)[static_cast<size_t>(q)] + ch.cut(c, k), es),
                  ch.cut(c, k + 1) - ch.cut(c, k), t, q, coll_tag_, coll_, reqs);
        }
    };
    stream->arrived = [=](int64_t k) {
        const int64_t lo = ch.cut(mine, k), len = ch.cut(mine, k + 1) - lo;
        const std::vector<char>& b = buf(k);
        std::vector<const void*> srcs(static_cast<size_t>(n));
        for (int q = 0; q < n; ++q) {
            srcs[static_cast<size_t>(q)] =
                q == r ? cbytes(send, (*off)[static_cast<size_t>(r)] + lo, es)
                       : cbytes(b.data(), len * q, es);
        }
        comm_detail::reduce_fixed_order(srcs, bytes(recv, lo, es), len, t);
    };
    op.phases.emplace_back(std::move(stream));
    op.phases.emplace_back([tmp](std::vector<MPI_Request>&) { *tmp = {}; });
}

void MpiComm::add_gather_phases(Op& op, void* recv, std::vector<int64_t> counts, CommType t,
                                const Chunks& ch) {
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    auto off = std::make_shared<const std::vector<int64_t>>(comm_detail::segment_offsets(counts));
    auto cnt = std::make_shared<const std::vector<int64_t>>(std::move(counts));
    auto stream = std::make_shared<Stream>();
    stream->chunks = ch;
    stream->post = [=, this](int64_t k, std::vector<MPI_Request>& reqs) {
        auto g = mpi_detail::lock();
        for (int q = 0; q < n; ++q) {
            const int64_t c = (*cnt)[static_cast<size_t>(q)];
            if (q != r)
                irecv(bytes(recv, (*off)[static_cast<size_t>(q)] + ch.cut(c, k), es),
                      ch.cut(c, k + 1) - ch.cut(c, k), t, q, coll_tag_, coll_, reqs);
        }
        const int64_t own = (*cnt)[static_cast<size_t>(r)];
        const void* piece = bytes(recv, (*off)[static_cast<size_t>(r)] + ch.cut(own, k), es);
        for (int i = 1; i < n; ++i) {
            isend(piece, ch.cut(own, k + 1) - ch.cut(own, k), t, (r + i) % n, coll_tag_, coll_,
                  reqs);
        }
    };
    op.phases.emplace_back(std::move(stream));
}

CommHandle MpiComm::all_reduce(void* buf, int64_t count, CommType t) {
    comm_detail::check_type(t, "all_reduce");
    ZT_CHECK(count >= 0, "comm all_reduce: count ", count, " < 0");
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    const auto seg = comm_detail::even_counts(count, n);
    const auto off = comm_detail::segment_offsets(seg);
    const int64_t mine = seg[static_cast<size_t>(r)];
    Op op(CollectiveKind::kAllReduce);
    op.state.count = count;
    op.state.type = t;
    op.bytes = static_cast<int64_t>(es) * ((count - mine) + mine * (n - 1));
    const Chunks ch = chunks_for(op, count, t);
    // In place: this rank's segment is reduced into itself (reduce_fixed_order allows the alias).
    add_reduce_scatter_phases(op, buf, bytes(buf, off[static_cast<size_t>(r)], es), seg, t, ch);
    add_gather_phases(op, buf, seg, t, ch);
    return enqueue(std::move(op));
}

CommHandle MpiComm::reduce_scatter(const void* send, void* recv, std::vector<int64_t> counts,
                                   CommType t) {
    comm_detail::check_type(t, "reduce_scatter");
    const int64_t total = comm_detail::checked_total(counts, size_, "reduce_scatter");
    const size_t es = comm_type_size(t);
    const int64_t mine = counts[static_cast<size_t>(rank_)];
    const char* s0 = static_cast<const char*>(send);
    const char* d0 = static_cast<const char*>(recv);
    ZT_CHECK(mine == 0 || total == 0 || d0 + mine * static_cast<int64_t>(es) <= s0 ||
                 s0 + total * static_cast<int64_t>(es) <= d0,
             "comm reduce_scatter: recv overlaps send; pass a separate recv buffer");
    Op op(CollectiveKind::kReduceScatter);
    op.state.count = total;
    op.state.type = t;
    op.bytes = static_cast<int64_t>(es) * (total - mine);
    const Chunks ch = chunks_for(op, total, t);
    add_reduce_scatter_phases(op, send, recv, std::move(counts), t, ch);
    return enqueue(std::move(op));
}

CommHandle MpiComm::all_gather(const void* send, void* recv, std::vector<int64_t> counts,
                               CommType t) {
    comm_detail::check_type(t, "all_gather");
    const int64_t total = comm_detail::checked_total(counts, size_, "all_gather");
    const size_t es = comm_type_size(t);
    const int n = size_, r = rank_;
    const int64_t own = comm_detail::segment_offsets(counts)[static_cast<size_t>(r)];
    const int64_t mine = counts[static_cast<size_t>(r)];
    Op op(CollectiveKind::kAllGather);
    op.state.count = total;
    op.state.type = t;
    op.bytes = static_cast<int64_t>(es) * mine * (n - 1);
    const Chunks ch = chunks_for(op, total, t);
    op.phases.push_back([=](std::vector<MPI_Request>&) {
        void* at = bytes(recv, own, es);
        if (at != send) std::memmove(at, send, static_cast<size_t>(mine) * es);
    });
    add_gather_phases(op, recv, std::move(counts), t, ch);
    return enqueue(std::move(op));
}

CommHandle MpiComm::broadcast(void* buf, int64_t count, CommType t, int root) {
    comm_detail::check_type(t, "broadcast");
    ZT_CHECK(count >= 0, "comm broadcast: count ", count, " < 0");
    check_peer(root, "broadcast");
    const size_t es = comm_type_size(t);
    Op op(CollectiveKind::kBroadcast);
    op.state.count = count;
    op.state.type = t;
    op.state.root = root;
    op.bytes = rank_ == root ? static_cast<int64_t>(es) * count * (size_ - 1) : 0;
    op.phases.push_back([=, this](std::vector<MPI_Request>& reqs) {
        auto g = mpi_detail::lock();
        // MPI's own tree broadcast: no arithmetic, so no order to fix.
        for (int64_t o = 0; o < count; o += opt_.max_piece_elems) {
            const int m = static_cast<int>(std::min(opt_.max_piece_elems, count - o));
            reqs.emplace_back();
            ZT_MPI(MPI_Ibcast(bytes(buf, o, es), m, mpi_detail::datatype(t), root, coll_,
                              &reqs.back()));
        }
    });
    return enqueue(std::move(op));
}

CommHandle MpiComm::all_to_all(const void* send, std::vector<int64_t> send_counts, void* recv,
                               std::vector<int64_t> recv_counts, CommType t) {
    comm_detail::check_type(t, "all_to_all");
    const int64_t total = comm_detail::checked_total(send_counts, size_, "all_to_all send");
    comm_detail::checked_total(recv_counts, size_, "all_to_all recv");
    const int n = size_, r = rank_;
    ZT_CHECK(send_counts[static_cast<size_t>(r)] == recv_counts[static_cast<size_t>(r)],
             "comm all_to_all: rank ", r, " sends itself ", send_counts[static_cast<size_t>(r)],
             " elements but expects ", recv_counts[static_cast<size_t>(r)]);
    const size_t es = comm_type_size(t);
    const auto soff = comm_detail::segment_offsets(send_counts);
    const auto roff = comm_detail::segment_offsets(recv_counts);
    Op op(CollectiveKind::kAllToAll);
    op.state.count = total;
    op.state.type = t;
    op.state.count_agrees = false;  // each rank sends its own total
    op.bytes = static_cast<int64_t>(es) * (total - send_counts[static_cast<size_t>(r)]);
    op.urgent = urgent_;  // never chunked: its counts, and so its chunks, would differ by rank
    op.phases.push_back([=, this, sc = std::move(send_counts),
                         rc = std::move(recv_counts)](std::vector<MPI_Request>& reqs) {
        std::memcpy(bytes(recv, roff[static_cast<size_t>(r)], es),
                    cbytes(send, soff[static_cast<size_t>(r)], es),
                    static_cast<size_t>(sc[static_cast<size_t>(r)]) * es);
        auto g = mpi_detail::lock();
        for (int q = 0; q < n; ++q) {
            if (q != r)
                irecv(bytes(recv, roff[static_cast<size_t>(q)], es), rc[static_cast<size_t>(q)], t,
                      q, coll_tag_, coll_, reqs);
        }
        for (int k = 1; k < n; ++k) {
            const int q = (r + k) % n;
            isend(cbytes(send, soff[static_cast<size_t>(q)], es), sc[static_cast<size_t>(q)], t, q,
                  coll_tag_, coll_, reqs);
        }
    });
    return enqueue(std::move(op));
}

CommHandle MpiComm::send(const void* buf, int64_t count, CommType t, int peer, int tag) {
    comm_detail::check_type(t, "send");
    check_peer(peer, "send");
    ZT_CHECK(count >= 0 && tag >= 0 && tag <= tag_ub_, "comm send: count ", count, " and tag ", tag,
             " must be >= 0, tag <= ", tag_ub_);
    Op op(CollectiveKind::kSend);
    op.collective = false;
    op.bytes = static_cast<int64_t>(comm_type_size(t)) * count;
    op.phases.push_back([=, this](std::vector<MPI_Request>& reqs) {
        auto g = mpi_detail::lock();
        isend(buf, count, t, peer, tag, comm_, reqs);
    });
    return enqueue(std::move(op));
}

CommHandle MpiComm::recv(void* buf, int64_t count, CommType t, int peer, int tag) {
    comm_detail::check_type(t, "recv");
    check_peer(peer, "recv");
    ZT_CHECK(count >= 0 && tag >= 0 && tag <= tag_ub_, "comm recv: count ", count, " and tag ", tag,
             " must be >= 0, tag <= ", tag_ub_);
    Op op(CollectiveKind::kRecv);
    op.collective = false;
    op.phases.push_back([=, this](std::vector<MPI_Request>& reqs) {
        auto g = mpi_detail::lock();
        irecv(buf, count, t, peer, tag, comm_, reqs);
    });
    return enqueue(std::move(op));
}

CommHandle MpiComm::barrier() {
    Op op(CollectiveKind::kBarrier);
    op.phases.push_back([this](std::vector<MPI_Request>& reqs) {
        auto g = mpi_detail::lock();
        reqs.emplace_back();
        ZT_MPI(MPI_Ibarrier(coll_, &reqs.back()));
    });
    return enqueue(std::move(op));
}

std::unique_ptr<Communicator> MpiComm::split(int color, int key) {
    MPI_Comm sub = MPI_COMM_NULL, sub_coll = MPI_COMM_NULL, sub_wd = MPI_COMM_NULL;
    Op op(CollectiveKind::kBarrier);
    op.state.op = comm_detail::kOpSplit;
    op.record = false;
    // MPI_Comm_split and MPI_Comm_dup block; on the worker, between collectives, that is safe:
    // every rank runs them at the same place in its op order.
    op.phases.push_back([&, this](std::vector<MPI_Request>&) {
        auto g = mpi_detail::lock();
        ZT_MPI(MPI_Comm_split(coll_, color < 0 ? MPI_UNDEFINED : color, key, &sub));
        if (sub != MPI_COMM_NULL) ZT_MPI(MPI_Comm_dup(sub, &sub_coll));
        if (sub != MPI_COMM_NULL) ZT_MPI(MPI_Comm_dup(sub, &sub_wd));
    });
    enqueue(std::move(op))->wait();
    ++split_count_;
    if (sub == MPI_COMM_NULL) return nullptr;
    auto c = std::make_unique<MpiComm>(
        sub, sub_coll, sub_wd,
        str_cat(watchdog_->group(), "/split", split_count_, "(color ", color, ")"), opt_);
    c->set_timeout(timeout_s_);
    c->set_check_sequence(check_sequence_);
    c->set_chunk_bytes(chunk_bytes_);
    return c;
}

}  // namespace zt::mpi_impl
