// Test helper: runs a shell command (or the zerotrain binary) and returns its exit code and its
// output, stdout and stderr together.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace zt::testing {

struct CommandResult {
    int code = -1;       // exit code; -1 when the command did not exit normally
    std::string output;  // stdout, with stderr unless it was dropped
};

// stderr goes into output, or is dropped when with_stderr is false (for parsing stdout).
inline CommandResult run_command(const std::string& cmd, bool with_stderr = true) {
    CommandResult r;
    FILE* p = popen((cmd + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    const int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

// `zerotrain ARGS` with the binary this build made.
inline CommandResult run_zerotrain(const std::string& args, bool with_stderr = true) {
    return run_command(std::string(ZT_BINARY) + " " + args, with_stderr);
}

}  // namespace zt::testing
