// Barrier and abort of the local backend's shared group state (local_group.h).
#include "comm/local/local_group.h"

#include "util/error.h"
#include "util/timer.h"

namespace zt::local_detail {

void Domain::abort_locked(const std::string& msg) {
    if (aborted) return;  // the first failure is the one worth reporting
    aborted = true;
    why = msg;
    for (auto& [key, box] : mail) {
        for (auto& r : box.recvs) {
            r.work->complete(std::make_exception_ptr(
                Error(ErrorKind::kInternal, __FILE__, __LINE__, why)));
        }
        box.recvs.clear();
    }
    cv.notify_all();
}

void Domain::throw_if_aborted_locked() const {
    if (aborted) throw Error(ErrorKind::kInternal, __FILE__, __LINE__, why);
}

Group::Group(std::shared_ptr<Domain> d, std::vector<int> world, std::string group_name)
    : dom(std::move(d)),
      name(std::move(group_name)),
      n(static_cast<int>(world.size())),
      world_ranks(std::move(world)),
      posts(static_cast<size_t>(n)),
      cur(static_cast<size_t>(n)),
      here(static_cast<size_t>(n), 0) {}

// Every rank is here, so none can leave for another collective: different ops are a certain
// deadlock (MPI would hang until the watchdog fires), reported at once.
void Group::check_same_op_locked(const BarrierWatch& w) {
    for (int q = 1; q < n; ++q) {
        if (!comm_detail::same_op(cur[0], cur[static_cast<size_t>(q)], w.check_sequence)) {
            dom->abort_locked(comm_detail::sequence_mismatch(
                w.check_sequence ? "comm check_sequence" : "comm", name, cur));
            dom->throw_if_aborted_locked();
        }
    }
}

void Group::time_out_locked(int rank, const BarrierWatch& w) {
    std::vector<comm_detail::RankState> states;
    for (const auto& s : cur) states.push_back({true, s});
    const comm_detail::HangInfo info{name, world_ranks, rank, now_s() - w.start, w.timeout_s};
    dom->abort_locked(comm_detail::hang_report(info, states));
    dom->throw_if_aborted_locked();
    ZT_FAIL("comm: the domain did not abort");  // unreachable
}

void Group::barrier(int rank, const BarrierWatch& w) {
    std::unique_lock lock(dom->mu);
    dom->throw_if_aborted_locked();
    const uint64_t gen = generation;
    here[static_cast<size_t>(rank)] = 1;
    if (++arrived == n) {
        check_same_op_locked(w);
        arrived = 0;
        std::fill(here.begin(), here.end(), 0);
        ++generation;
        dom->cv.notify_all();
        return;
    }
    auto missing_exited = [&]() -> int {
        for (int r = 0; r < n; ++r) {
            if (!here[static_cast<size_t>(r)] && dom->exited[static_cast<size_t>(world_ranks[r])])
                return world_ranks[r];
        }
        return -1;
    };
    int gone = -1;
    auto done = [&] {
        if (generation != gen || dom->aborted) return true;
        gone = missing_exited();
        return gone >= 0;
    };
    if (w.timeout_s <= 0) {
        dom->cv.wait(lock, done);
    } else {
        const double deadline = w.start + w.timeout_s;
        while (!done()) {
            const double left = deadline - now_s();
            if (left <= 0) time_out_locked(rank, w);
            dom->cv.wait_for(lock, std::chrono::duration<double>(left));
        }
    }
    if (generation != gen) return;  // completed, even if an abort came just after
    if (!dom->aborted) {
        dom->abort_locked(str_cat("rank ", gone,
                                  " failed: it returned while rank ", world_ranks[rank],
                                  " waits for it in a collective (do all ranks issue the same "
                                  "collectives in the same order?)"));
    }
    dom->throw_if_aborted_locked();
}

}  // namespace zt::local_detail
