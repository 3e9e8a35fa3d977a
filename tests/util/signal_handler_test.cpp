// set_signal_handler (util/signal_handler.h): a handler that sigaction installs runs; one it
// refuses is an error naming the signal, not a silently ignored result (issue 12).
#include "util/signal_handler.h"

#include <gtest/gtest.h>

#include <csignal>

#include "util/error.h"

namespace zt {
namespace {

volatile std::sig_atomic_t g_seen = 0;
extern "C" void note_signal(int sig) { g_seen = sig; }

TEST(SignalHandler, InstalledHandlerRuns) {
    g_seen = 0;
    set_signal_handler(SIGUSR1, note_signal);
    ASSERT_EQ(std::raise(SIGUSR1), 0);
    EXPECT_EQ(g_seen, SIGUSR1);
    std::signal(SIGUSR1, SIG_DFL);
}

TEST(SignalHandler, RefusedHandlerIsAnError) {
    try {
        set_signal_handler(SIGKILL, note_signal);  // sigaction refuses SIGKILL: EINVAL
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInternal);
        const std::string m = e.message();
        EXPECT_NE(m.find("signal 9 (Killed)"), std::string::npos) << m;
        EXPECT_NE(m.find("sigaction: Invalid argument"), std::string::npos) << m;
    }
}

}  // namespace
}  // namespace zt
