#include "util/log.h"

#include <atomic>
#include <cstdio>

namespace zt {

namespace {
// Process-wide verbosity; the only mutable global in util, written once at startup by the CLI.
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace

void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_message(LogLevel level, const std::string& msg) {
    static const char* kPrefix[] = {"debug: ", "", "warning: ", "error: "};
    std::fprintf(stderr, "%s%s\n", kPrefix[static_cast<int>(level)], msg.c_str());
}

}  // namespace zt
