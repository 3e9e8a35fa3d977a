// A communicator that records, for the schedule tests: each collective's issue (kind and element
// type) and its handle's first wait, in one log with the test's own events (module hooks,
// micro-step bounds). Its handles answer test() with "not yet", as a slow network would, so the
// order seen is the engine's own, not the threads' relative speed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zt {

struct Event {
    enum Kind { kIssue, kWait, kHook, kMicroStart, kMicroEnd } kind;
    int id = -1;                                   // kIssue, kWait: the op's number
    CollectiveKind op = CollectiveKind::kBarrier;  // kIssue
    CommType type = CommType::kF32;                // kIssue
};
using Log = std::vector<Event>;

class RecordedWork final : public CommWork {
  public:
    RecordedWork(CommHandle inner, int id, Log* log)
        : inner_(std::move(inner)), id_(id), log_(log) {}
    void wait() override {
        if (!waited_) log_->push_back({Event::kWait, id_});
        waited_ = true;
        inner_->wait();
    }
    bool test() override { return false; }  // "not yet": see the file comment

  private:
    CommHandle inner_;
    int id_;
    Log* log_;
    bool waited_ = false;
};

// Forwards every op to `inner`, logging its issue; the handles log their first wait.
class RecordingComm final : public Communicator {
  public:
    RecordingComm(Communicator& inner, Log* log) : inner_(inner), log_(log) {}
    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    std::string backend() const override { return inner_.backend(); }
    CommHandle all_reduce(void* buf, int64_t count, CommType t) override {
        return record(CollectiveKind::kAllReduce, t, inner_.all_reduce(buf, count, t));
    }
    CommHandle reduce_scatter(const void* send, void* recv, std::vector<int64_t> counts,
                              CommType t) override {
        return record(CollectiveKind::kReduceScatter, t,
                      inner_.reduce_scatter(send, recv, std::move(counts), t));
    }
    CommHandle all_gather(const void* send, void* recv, std::vector<int64_t> counts,
                          CommType t) override {
        return record(CollectiveKind::kAllGather, t,
                      inner_.all_gather(send, recv, std::move(counts), t));
    }
    CommHandle broadcast(void* buf, int64_t count, CommType t, int root) override {
        return record(CollectiveKind::kBroadcast, t, inner_.broadcast(buf, count, t, root));
    }
    CommHandle all_to_all(const void* send, std::vector<int64_t> send_counts, void* recv,
                          std::vector<int64_t> recv_counts, CommType t) override {
        return record(
            CollectiveKind::kAllToAll, t,
            inner_.all_to_all(send, std::move(send_counts), recv, std::move(recv_counts), t));
    }
    CommHandle send(const void* buf, int64_t count, CommType t, int peer, int tag) override {
        return record(CollectiveKind::kSend, t, inner_.send(buf, count, t, peer, tag));
    }
    CommHandle recv(void* buf, int64_t count, CommType t, int peer, int tag) override {
        return record(CollectiveKind::kRecv, t, inner_.recv(buf, count, t, peer, tag));
    }
    CommHandle barrier() override {
        return record(CollectiveKind::kBarrier, CommType::kU8, inner_.barrier());
    }
    std::unique_ptr<Communicator> split(int color, int key) override {
        return inner_.split(color, key);
    }
    CommStats stats() const override { return inner_.stats(); }
    void reset_stats() override { inner_.reset_stats(); }
    void set_timeout(double seconds) override { inner_.set_timeout(seconds); }
    void set_check_sequence(bool on) override { inner_.set_check_sequence(on); }

  private:
    CommHandle record(CollectiveKind k, CommType t, CommHandle h) {
        const int id = next_id_++;
        log_->push_back({Event::kIssue, id, k, t});
        return std::make_shared<RecordedWork>(std::move(h), id, log_);
    }

    Communicator& inner_;
    Log* log_;
    int next_id_ = 0;
};

inline bool is_reduction(const Event& e) {
    return e.op == CollectiveKind::kAllReduce || e.op == CollectiveKind::kReduceScatter;
}

}  // namespace zt
