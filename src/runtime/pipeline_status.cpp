#include "runtime/pipeline_status.h"

#include <chrono>
#include <thread>

#include "parallel/pipeline_schedule.h"
#include "util/error.h"
#include "util/timer.h"

namespace zt {

namespace {
constexpr int kRequestTag = 1;  // requests and goodbyes, into the posted receives
constexpr int kReplyTag = 2;
constexpr int64_t kRequest = 1, kReply = 2, kBye = 3;

void pack(const StageActivity& a, int64_t type, std::array<int64_t, 8>& m) {
    m = {type, a.op, a.micro, a.chunk, a.waiting, a.peer, a.wait_micro, 0};
}
StageActivity unpack(const std::array<int64_t, 8>& m) {
    return {static_cast<int>(m[1]), static_cast<int>(m[2]), static_cast<int>(m[3]),
            static_cast<int>(m[4]), static_cast<int>(m[5]), static_cast<int>(m[6])};
}
}  // namespace

std::string describe_activity(const StageActivity& a, int chunks) {
    if (a.op < 0) return "between steps";
    std::string s = str_cat("in ", pipe_op_kind_name(static_cast<PipeOpKind>(a.op)),
                            " of micro-batch ", a.micro);
    if (chunks > 1) s += str_cat(" (chunk ", a.chunk, ")");
    if (a.waiting == 1 || a.waiting == 2)
        s += str_cat(", waiting for the ", a.waiting == 1 ? "activations" : "gradients",
                     " of micro-batch ", a.wait_micro, " from stage ", a.peer);
    else if (a.waiting == 3)
        s += str_cat(", waiting to send to stage ", a.peer);
    return s;
}

PipelineStatus::PipelineStatus(Communicator& pp)
    : chan_(pp.split(0, pp.rank())), me_(pp.rank()), n_(pp.size()) {
    req_buf_.assign(static_cast<size_t>(n_), nullptr);
    req_.assign(static_cast<size_t>(n_), nullptr);
    for (int q = 0; q < n_; ++q)
        if (q != me_) post(q);
}

PipelineStatus::~PipelineStatus() {
    // Buffers whose operation may still complete are left allocated (a failed run; Note
    // [Pipeline watchdog]); after close() nothing is pending and everything is freed.
    if (!closed_) return;
    for (Msg* m : req_buf_) delete m;
    for (auto& [m, h] : sent_) delete m;
}

void PipelineStatus::post(int from) {
    if (!req_buf_[static_cast<size_t>(from)]) req_buf_[static_cast<size_t>(from)] = new Msg{};
    req_[static_cast<size_t>(from)] = chan_->recv(req_buf_[static_cast<size_t>(from)]->data(), 8,
                                                  CommType::kI64, from, kRequestTag);
}

void PipelineStatus::serve() {
    for (int q = 0; q < n_; ++q) {
        CommHandle& h = req_[static_cast<size_t>(q)];
        if (!h || !h->test()) continue;
        h->wait();
        const int64_t type = (*req_buf_[static_cast<size_t>(q)])[0];
        h = nullptr;
        if (type == kBye) continue;  // that stage is done: its receive is not posted again
        auto* reply = new Msg{};
        pack(mine_, kReply, *reply);
        sent_.emplace_back(reply, chan_->send(reply->data(), 8, CommType::kI64, q, kReplyTag));
        post(q);
    }
    while (!sent_.empty() && sent_.front().second->test()) {
        delete sent_.front().first;
        sent_.erase(sent_.begin());
    }
}

std::optional<StageActivity> PipelineStatus::ask(int stage, double seconds) {
    auto* request = new Msg{};
    pack(mine_, kRequest, *request);
    sent_.emplace_back(request,
                       chan_->send(request->data(), 8, CommType::kI64, stage, kRequestTag));
    auto* answer = new Msg{};  // left allocated when no answer comes (it may come later)
    CommHandle h = chan_->recv(answer->data(), 8, CommType::kI64, stage, kReplyTag);
    Stopwatch sw;
    h->need();
    while (!h->test()) {
        serve();
        if (sw.elapsed_s() > seconds) return std::nullopt;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    h->wait();
    const StageActivity a = unpack(*answer);
    delete answer;
    return a;
}

void PipelineStatus::close(double seconds) {
    if (closed_) return;
    for (int q = 0; q < n_; ++q) {
        if (q == me_) continue;
        auto* bye = new Msg{};
        pack(mine_, kBye, *bye);
        sent_.emplace_back(bye, chan_->send(bye->data(), 8, CommType::kI64, q, kRequestTag));
    }
    Stopwatch sw;
    for (;;) {
        serve();
        bool pending = !sent_.empty();
        for (const CommHandle& h : req_) pending = pending || h != nullptr;
        if (!pending) break;
        if (seconds > 0 && sw.elapsed_s() > seconds) return;  // left pending: never freed
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    closed_ = true;
}

}  // namespace zt
