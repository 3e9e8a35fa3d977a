#include "util/signal_handler.h"

#include <cerrno>
#include <csignal>
#include <cstring>

#include "util/error.h"

namespace zt {

void set_signal_handler(int sig, void (*handler)(int), int flags) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = flags;
    if (::sigaction(sig, &sa, nullptr) == 0) return;
    const int err = errno;
    throw Error(ErrorKind::kInternal, __FILE__, __LINE__,
                str_cat("cannot install a handler for signal ", sig, " (", strsignal(sig),
                        "): sigaction: ", std::strerror(err)));
}

}  // namespace zt
