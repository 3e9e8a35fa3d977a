#include "runtime/fault_injection.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "util/error.h"

namespace zt {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t b = 0;
    for (size_t e; (e = s.find(sep, b)) != std::string::npos; b = e + 1)
        out.push_back(s.substr(b, e - b));
    out.push_back(s.substr(b));
    return out;
}

int64_t parse_int(const std::string& v, const std::string& key, const std::string& fault) {
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    ZT_CHECK(!v.empty() && end && *end == '\0' && x >= 0, "ZT_FAULT: \"", fault, "\": ", key,
             " expects a non-negative integer, got \"", v, "\"");
    return x;
}

Fault parse_one(const std::string& text) {
    const std::vector<std::string> parts = split(text, ':');
    Fault f;
    if (parts[0] == "kill")
        f.kind = Fault::Kind::kKill;
    else if (parts[0] == "kill_in_checkpoint")
        f.kind = Fault::Kind::kKillInCheckpoint;
    else if (parts[0] == "kill_in_writeback")
        f.kind = Fault::Kind::kKillInWriteback;
    else if (parts[0] == "fail_start")
        f.kind = Fault::Kind::kFailStart;
    else
        ZT_FAIL("ZT_FAULT: unknown fault \"", parts[0], "\" in \"", text,
                "\"; expected kill, kill_in_checkpoint, kill_in_writeback or fail_start");
    for (size_t i = 1; i < parts.size(); ++i) {
        const size_t eq = parts[i].find('=');
        ZT_CHECK(eq != std::string::npos, "ZT_FAULT: \"", text, "\": expected key=value, got \"",
                 parts[i], "\"");
        const std::string key = parts[i].substr(0, eq), v = parts[i].substr(eq + 1);
        if (key == "rank")
            f.rank = static_cast<int>(parse_int(v, key, text));
        else if (key == "step")
            f.step = parse_int(v, key, text);
        else if (key == "world")
            f.world = static_cast<int>(parse_int(v, key, text));
        else if (key == "attempt")
            f.attempt = v == "*" ? -1 : static_cast<int>(parse_int(v, key, text));
        else
            ZT_FAIL("ZT_FAULT: \"", text, "\": unknown key \"", key,
                    "\"; expected rank, step, world or attempt");
    }
    ZT_CHECK(f.kind == Fault::Kind::kFailStart || f.step >= 1, "ZT_FAULT: \"", text,
             "\" needs step=N (N >= 1)");
    return f;
}

int current_attempt() {
    const char* a = std::getenv("ZT_LAUNCH_ATTEMPT");
    return a ? std::atoi(a) : 0;
}

// The first fault of ZT_FAULT of this kind that matches, if any.
std::optional<Fault> armed(Fault::Kind kind, int rank, int world, int64_t step) {
    const char* spec = std::getenv("ZT_FAULT");
    if (!spec || !*spec) return std::nullopt;
    const int attempt = current_attempt();
    for (const Fault& f : parse_faults(spec))
        if (f.kind == kind && (f.rank < 0 || f.rank == rank) && (f.world < 0 || f.world == world) &&
            (f.attempt < 0 || f.attempt == attempt) && (step < 0 || f.step == step))
            return f;
    return std::nullopt;
}

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "zerotrain: fault injection (ZT_FAULT): %s; SIGKILL\n", what.c_str());
    std::fflush(stderr);
    std::raise(SIGKILL);
    std::_Exit(137);  // not reached
}

}  // namespace

std::vector<Fault> parse_faults(const std::string& spec) {
    std::vector<Fault> out;
    for (const std::string& one : split(spec, ','))
        if (!one.empty()) out.push_back(parse_one(one));
    return out;
}

void fault_after_step(int rank, int world, int64_t step) {
    if (armed(Fault::Kind::kKill, rank, world, step))
        die(str_cat("rank ", rank, " after step ", step));
}

void fault_in_checkpoint_write(int rank, int64_t step, const std::string& shard_path) {
    if (!armed(Fault::Kind::kKillInCheckpoint, rank, -1, step)) return;
    // What a crash in the middle of the shard's write leaves: the start of the temporary file.
    const std::string tmp = shard_path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        const char partial[] = "\x40\x00\x00\x00\x00\x00\x00\x00{\"master\":{\"dtype\":\"F32\"";
        [[maybe_unused]] const ssize_t n = ::write(fd, partial, sizeof partial - 1);
        ::fsync(fd);
        ::close(fd);
    }
    die(str_cat("rank ", rank, " while writing its shard of the checkpoint of step ", step));
}

void fault_in_writeback(int rank, int64_t step) {
    if (armed(Fault::Kind::kKillInWriteback, rank, -1, step))
        die(str_cat("rank ", rank, " while writing evicted embedding rows back in step ", step));
}

void fault_at_start(int rank, int world) {
    if (armed(Fault::Kind::kFailStart, rank, world, -1))
        die(str_cat("rank ", rank, " at start in a world of ", world, " ranks"));
}

}  // namespace zt
