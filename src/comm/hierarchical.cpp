#include "comm/hierarchical.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>

#include "comm/detail.h"
#include "util/error.h"

namespace zt {

namespace {

using comm_detail::even_counts;
using comm_detail::segment_offsets;

// An op of several phases: the first issued at once, each later one issued by wait() once the one
// before completed (a phase may also be local work that returns no handle).
class PhasedWork final : public CommWork {
  public:
    using Phase = std::function<CommHandle()>;
    PhasedWork(CommHandle first, std::vector<Phase> rest)
        : cur_(std::move(first)), rest_(std::move(rest)) {}
    void wait() override {
        while (!done_) {
            if (cur_) cur_->wait();
            if (next_ == rest_.size()) {
                done_ = true;
                rest_.clear();  // releases the phases' buffers
                break;
            }
            cur_ = rest_[next_++]();
        }
    }
    bool test() override { return done_; }

  private:
    CommHandle cur_;
    std::vector<Phase> rest_;
    size_t next_ = 0;
    bool done_ = false;
};

class HierarchicalComm final : public Communicator {
  public:
    HierarchicalComm(Communicator& flat, int per_host)
        : flat_(flat), L_(per_host), H_(flat.size() / per_host) {
        host_ = flat.rank() / L_;
        local_ = flat.rank() % L_;
        intra_ = flat.split(host_, local_);
        inter_ = flat.split(local_, host_);
    }

    int rank() const override { return flat_.rank(); }
    int size() const override { return flat_.size(); }
    std::string backend() const override { return flat_.backend(); }

    CommHandle all_reduce(void* buf, int64_t count, CommType t) override {
        const size_t es = comm_type_size(t);
        auto chunks = std::make_shared<std::vector<int64_t>>(even_counts(count, L_));
        const int64_t mine = (*chunks)[static_cast<size_t>(local_)];
        auto part = std::make_shared<std::vector<char>>(static_cast<size_t>(mine) * es + 1);
        CommHandle first = intra_->reduce_scatter(buf, part->data(), *chunks, t);
        std::vector<PhasedWork::Phase> rest = {
            urgent([this, part, mine, t] { return inter_->all_reduce(part->data(), mine, t); }),
            urgent([this, part, chunks, buf, t] {
                return intra_->all_gather(part->data(), buf, *chunks, t);
            })};
        return std::make_shared<PhasedWork>(std::move(first), std::move(rest));
    }

    CommHandle reduce_scatter(const void* send, void* recv, std::vector<int64_t> counts,
                              CommType t) override {
        ZT_CHECK(static_cast<int>(counts.size()) == size(), "reduce_scatter: ", counts.size(),
                 " counts for ", size(), " ranks");
        const size_t es = comm_type_size(t);
        // The segments regrouped by local rank: local rank l's chunk holds segment (h, l) of every
        // host h, in host order.
        auto grouped = std::make_shared<std::vector<char>>(regroup_bytes(counts, es) + 1);
        regroup(static_cast<const char*>(send), counts, es, grouped->data(), false);
        auto chunks = std::make_shared<std::vector<int64_t>>(local_totals(counts));
        const int64_t mine = (*chunks)[static_cast<size_t>(local_)];
        auto part = std::make_shared<std::vector<char>>(static_cast<size_t>(mine) * es + 1);
        CommHandle first = intra_->reduce_scatter(grouped->data(), part->data(), *chunks, t);
        std::vector<PhasedWork::Phase> rest = {urgent([this, grouped, part, recv, counts, t] {
            return inter_->reduce_scatter(part->data(), recv, across(counts), t);
        })};
        return std::make_shared<PhasedWork>(std::move(first), std::move(rest));
    }

    CommHandle all_gather(const void* send, void* recv, std::vector<int64_t> counts,
                          CommType t) override {
        ZT_CHECK(static_cast<int>(counts.size()) == size(), "all_gather: ", counts.size(),
                 " counts for ", size(), " ranks");
        const size_t es = comm_type_size(t);
        auto chunks = std::make_shared<std::vector<int64_t>>(local_totals(counts));
        const int64_t mine = (*chunks)[static_cast<size_t>(local_)];
        auto part = std::make_shared<std::vector<char>>(static_cast<size_t>(mine) * es + 1);
        auto grouped = std::make_shared<std::vector<char>>(regroup_bytes(counts, es) + 1);
        CommHandle first = inter_->all_gather(send, part->data(), across(counts), t);
        std::vector<PhasedWork::Phase> rest = {
            urgent([this, part, grouped, chunks, t] {
                return intra_->all_gather(part->data(), grouped->data(), *chunks, t);
            }),
            [this, grouped, recv, counts, es]() -> CommHandle {
                regroup(grouped->data(), counts, es, static_cast<char*>(recv), true);
                return nullptr;
            }};
        return std::make_shared<PhasedWork>(std::move(first), std::move(rest));
    }

    CommHandle broadcast(void* buf, int64_t count, CommType t, int root) override {
        return flat_.broadcast(buf, count, t, root);
    }
    CommHandle all_to_all(const void* send, std::vector<int64_t> send_counts, void* recv,
                          std::vector<int64_t> recv_counts, CommType t) override {
        return flat_.all_to_all(send, std::move(send_counts), recv, std::move(recv_counts), t);
    }
    CommHandle send(const void* buf, int64_t count, CommType t, int peer, int tag) override {
        return flat_.send(buf, count, t, peer, tag);
    }
    CommHandle recv(void* buf, int64_t count, CommType t, int peer, int tag) override {
        return flat_.recv(buf, count, t, peer, tag);
    }
    CommHandle barrier() override { return flat_.barrier(); }
    std::unique_ptr<Communicator> split(int color, int key) override {
        return flat_.split(color, key);
    }

    // The two phases' groups (the flat group's own ops are counted by the flat group).
    CommStats stats() const override {
        CommStats s = intra_->stats();
        const CommStats x = inter_->stats();
        for (int k = 0; k < kCollectiveKindCount; ++k) {
            s.count[k] += x.count[k];
            s.bytes_sent[k] += x.bytes_sent[k];
            s.seconds[k] += x.seconds[k];
        }
        s.busy_s += x.busy_s;
        return s;
    }
    void reset_stats() override {
        intra_->reset_stats();
        inter_->reset_stats();
    }
    void set_timeout(double seconds) override {
        flat_.set_timeout(seconds);
        intra_->set_timeout(seconds);
        inter_->set_timeout(seconds);
    }
    void set_check_sequence(bool on) override {
        flat_.set_check_sequence(on);
        intra_->set_check_sequence(on);
        inter_->set_check_sequence(on);
    }
    // Urgency holds for every phase of an op, those wait() issues later included (urgent()).
    bool set_urgent(bool on) override {
        flat_.set_urgent(on);
        intra_->set_urgent(on);
        inter_->set_urgent(on);
        return std::exchange(urgent_, on);
    }
    void set_chunk_bytes(int64_t bytes) override {
        flat_.set_chunk_bytes(bytes);
        intra_->set_chunk_bytes(bytes);
        inter_->set_chunk_bytes(bytes);
    }

    const Communicator& inter() const { return *inter_; }

  private:
    // counts of segments (h, local_) for every host h.
    std::vector<int64_t> across(const std::vector<int64_t>& counts) const {
        std::vector<int64_t> c(static_cast<size_t>(H_));
        for (int h = 0; h < H_; ++h)
            c[static_cast<size_t>(h)] = counts[static_cast<size_t>(h * L_ + local_)];
        return c;
    }
    // Per local rank l: the elements of segments (h, l) over every host.
    std::vector<int64_t> local_totals(const std::vector<int64_t>& counts) const {
        std::vector<int64_t> c(static_cast<size_t>(L_), 0);
        for (int r = 0; r < size(); ++r)
            c[static_cast<size_t>(r % L_)] += counts[static_cast<size_t>(r)];
        return c;
    }
    size_t regroup_bytes(const std::vector<int64_t>& counts, size_t es) const {
        int64_t n = 0;
        for (int64_t c : counts) n += c;
        return static_cast<size_t>(n) * es;
    }
    // Rank order <-> grouped order (local rank major, then host). back: grouped -> rank order.
    void regroup(const char* from, const std::vector<int64_t>& counts, size_t es, char* to,
                 bool back) const {
        const std::vector<int64_t> off = segment_offsets(counts);
        size_t at = 0;
        for (int l = 0; l < L_; ++l)
            for (int h = 0; h < H_; ++h) {
                const size_t r = static_cast<size_t>(h * L_ + l);
                const size_t bytes = static_cast<size_t>(counts[r]) * es;
                const size_t ranked = static_cast<size_t>(off[r]) * es;
                if (bytes > 0) {
                    if (back)
                        std::memcpy(to + ranked, from + at, bytes);
                    else
                        std::memcpy(to + at, from + ranked, bytes);
                }
                at += bytes;
            }
    }

    // A later phase of an op issued now: issued, when wait() gets to it, as urgent as the op.
    PhasedWork::Phase urgent(PhasedWork::Phase p) const {
        if (!urgent_) return p;
        return [this, p = std::move(p)] {
            UrgentScope a(intra_.get()), b(inter_.get());
            return p();
        };
    }

    Communicator& flat_;
    int L_, H_, host_ = 0, local_ = 0;
    std::unique_ptr<Communicator> intra_, inter_;
    bool urgent_ = false;  // Note [Urgent ops]
};

}  // namespace

std::string host_key() {
    if (const char* h = std::getenv("ZT_HOST"); h && *h) return h;
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) std::strcpy(name, "unknown-host");
    char ns[128] = {};
    const ssize_t n = ::readlink("/proc/self/ns/net", ns, sizeof ns - 1);
    return n > 0 ? str_cat(name, "/", std::string(ns, static_cast<size_t>(n))) : std::string(name);
}

int ranks_per_host(const std::vector<std::string>& hosts, std::string* why) {
    auto fail = [&](std::string w) {
        if (why) *why = std::move(w);
        return 0;
    };
    const int R = static_cast<int>(hosts.size());
    int L = 1;
    while (L < R && hosts[static_cast<size_t>(L)] == hosts[0]) ++L;
    if (L == R) return fail(str_cat("all ", R, " ranks are on one host"));
    if (L == 1) return fail("one rank per host: nothing to combine within a host");
    if (R % L != 0)
        return fail(str_cat("the first host has ", L, " ranks, which does not divide ", R));
    for (int r = 0; r < R; ++r) {
        const std::string& h = hosts[static_cast<size_t>(r)];
        if (h != hosts[static_cast<size_t>(r / L * L)])
            return fail(str_cat("rank ", r, " is on ", h, ", not on the host of rank ", r / L * L,
                                " (the hosts' ranks must be consecutive, ", L, " each)"));
        if (r % L == 0 && r > 0)
            for (int q = 0; q < r; q += L)
                if (hosts[static_cast<size_t>(q)] == h)
                    return fail(str_cat("host ", h, " holds ranks ", q, " and ", r,
                                        ", which are not consecutive"));
    }
    return L;
}

std::unique_ptr<Communicator> make_hierarchical(Communicator& flat,
                                                const std::vector<std::string>& hosts,
                                                std::string* why) {
    ZT_CHECK(static_cast<int>(hosts.size()) == flat.size(), "hierarchical: ", hosts.size(),
             " hosts for ", flat.size(), " ranks");
    const int L = ranks_per_host(hosts, why);
    if (L == 0) return nullptr;
    return std::make_unique<HierarchicalComm>(flat, L);
}

const Communicator* cross_host_group(const Communicator& c) {
    const auto* h = dynamic_cast<const HierarchicalComm*>(&c);
    return h ? &h->inter() : nullptr;
}

}  // namespace zt
