#include "runtime/start_agreement.h"

#include <algorithm>
#include <exception>
#include <vector>

// Note [Start agreement]
// The config agreement (agree_on_config) covers what every rank can judge from the config alone.
// Inputs are judged when opened: a data file missing on one host, ids past the vocabulary, a
// truncated init_from. Were such an error thrown on the ranks that see it, the others would wait
// in their next collective until the watchdog or an MPI abort ended the job with exit code 1, and
// `zerotrain launch` would restart bad input as if it were a crash. So each phase that may fail
// this way runs inside agree_on_start: one all_gather of every rank's outcome (0 ok, 1 input
// error, 2 other failure) and a broadcast of the lowest failed rank's message, after which every
// rank throws the same AgreedError and exits on its own with the same code.

namespace zt {

void agree_on_start(Communicator* comm, const std::string& what, const std::function<void()>& fn) {
    const bool alone = !comm || comm->size() == 1;
    int64_t status = 0;
    std::string message;
    try {
        fn();
    } catch (const Error& e) {
        if (alone) throw;
        status = e.kind() == ErrorKind::kInput ? 1 : 2;
        message = e.message();
    } catch (const std::exception& e) {
        if (alone) throw;
        status = 2;
        message = e.what();
    }
    if (alone) return;
    const int n = comm->size();
    std::vector<int64_t> all(static_cast<size_t>(n));
    comm->all_gather(&status, all.data(), std::vector<int64_t>(static_cast<size_t>(n), 1),
                     CommType::kI64)
        ->wait();
    const auto first = std::find_if(all.begin(), all.end(), [](int64_t s) { return s != 0; });
    if (first == all.end()) return;
    const int failed = static_cast<int>(first - all.begin());
    const bool input = std::none_of(all.begin(), all.end(), [](int64_t s) { return s == 2; });
    int64_t len = static_cast<int64_t>(message.size());
    comm->broadcast(&len, 1, CommType::kI64, failed)->wait();
    message.resize(static_cast<size_t>(len));
    comm->broadcast(message.data(), len, CommType::kU8, failed)->wait();
    std::string others;
    int count = 0;
    for (int r = 0; r < n; ++r)
        if (all[static_cast<size_t>(r)] != 0) ++count;
    if (count > 1) others = str_cat(" (and ", count - 1, " more rank(s))");
    throw AgreedError(input ? ErrorKind::kInput : ErrorKind::kInternal, __FILE__, __LINE__,
                      str_cat("rank ", failed, ": ", message, " [", what, others,
                              "; every rank stops]"));
}

}  // namespace zt
