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

Group::Group(std::shared_ptr<Domain> d, std::vector<int> world)
    : dom(std::move(d)),
      n(static_cast<int>(world.size())),
      world_ranks(std::move(world)),
      posts(static_cast<size_t>(n)),
      here(static_cast<size_t>(n), 0) {}

void Group::barrier(int rank) {
    std::unique_lock lock(dom->mu);
    dom->throw_if_aborted_locked();
    const uint64_t gen = generation;
    here[static_cast<size_t>(rank)] = 1;
    if (++arrived == n) {
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
    dom->cv.wait(lock, [&] {
        if (generation != gen || dom->aborted) return true;
        gone = missing_exited();
        return gone >= 0;
    });
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
