#include "data/click/criteo_tsv_stream.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "data/click/ctr_file.h"
#include "data/click/synth_ctr_stream.h"  // stream_part_name
#include "util/error.h"
#include "util/log.h"

namespace zt {

namespace {

using Clock = std::chrono::steady_clock;

// The input as a file descriptor: standard input or the file, closed with it.
class Input {
  public:
    explicit Input(const std::string& path) : path_(path) {
        if (path == "-") return;
        fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        ZT_CHECK(fd_ >= 0, "criteo stream: cannot open ", path, ": ", std::strerror(errno));
        owned_ = true;
    }
    ~Input() {
        if (owned_) ::close(fd_);
    }
    Input(const Input&) = delete;
    Input& operator=(const Input&) = delete;
    // Bytes read into buf: 0 at the end of the input (for now, for a file that grows), -1 when
    // nothing arrived within wait_s (a pipe or terminal that is still open).
    ssize_t read(char* buf, size_t n, double wait_s) {
        pollfd p{fd_, POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(wait_s * 1000));
        ZT_CHECK(ready >= 0 || errno == EINTR, "criteo stream: waiting for ", path_, ": ",
                 std::strerror(errno));
        if (ready <= 0) return -1;
        for (;;) {
            const ssize_t got = ::read(fd_, buf, n);
            if (got >= 0) return got;
            ZT_CHECK(errno == EINTR, "criteo stream: reading ", path_, ": ", std::strerror(errno));
        }
    }

  private:
    std::string path_;
    int fd_ = 0;  // standard input
    bool owned_ = false;
};

}  // namespace

TsvStreamResult stream_criteo_tsv(const TsvStreamOptions& o) {
    check_criteo_table_rows(o.table_rows);
    ZT_CHECK(o.part_records >= 1 && o.flush_s >= 0, "criteo stream: part_records must be >= 1 ",
             "and flush_s >= 0 (got ", o.part_records, " and ", o.flush_s, ")");
    std::filesystem::create_directories(o.dir);
    const std::string name = o.in == "-" ? std::string("standard input") : o.in;
    Input input(o.in);
    TsvStreamResult r;
    std::unique_ptr<CtrFileWriter> part;
    int64_t in_part = 0;
    Clock::time_point first{};
    auto finish_part = [&] {
        if (!part) return;
        part->finish();
        part.reset();
        in_part = 0;
        ++r.parts;
    };
    auto cancelled = [&] { return o.cancel != nullptr && o.cancel->load(); };
    std::string pending;  // bytes after the last newline
    std::vector<char> buf(1 << 16);
    int64_t line_no = 0;
    for (;;) {
        const ssize_t got = input.read(buf.data(), buf.size(), o.poll_s);
        if (got <= 0) {  // nothing yet (-1), or the end for now (0)
            if (in_part > 0 && Clock::now() - first >= std::chrono::duration<double>(o.flush_s))
                finish_part();
            if ((got == 0 && !o.follow) || cancelled()) break;
            if (got == 0) std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_s));
            continue;
        }
        pending.append(buf.data(), static_cast<size_t>(got));
        size_t pos = 0;
        for (size_t nl; (nl = pending.find('\n', pos)) != std::string::npos; pos = nl + 1) {
            ++line_no;
            if (!part) {
                part = std::make_unique<CtrFileWriter>(
                    (std::filesystem::path(o.dir) / stream_part_name(r.parts)).string(),
                    kCriteoDense, o.table_rows);
                first = Clock::now();
            }
            const std::string err = add_criteo_line(std::string_view(pending).substr(pos, nl - pos),
                                                    o.table_rows, *part);
            if (!err.empty()) {
                ZT_CHECK(o.on_bad == BadRecord::kSkip, name, ":", line_no, ": ", err,
                         " (on_bad_record \"skip\" drops such lines)");
                if (r.skipped++ < 5) log_warn(name, ":", line_no, ": ", err, "; skipped");
                continue;
            }
            ++r.records;
            if (++in_part == o.part_records) finish_part();
        }
        pending.erase(0, pos);
        if (cancelled()) break;
    }
    // A last line without a newline at the end of a finished input is a line too.
    if (!o.follow && !pending.empty()) {
        if (!part)
            part = std::make_unique<CtrFileWriter>(
                (std::filesystem::path(o.dir) / stream_part_name(r.parts)).string(), kCriteoDense,
                o.table_rows);
        const std::string err = add_criteo_line(pending, o.table_rows, *part);
        ZT_CHECK(err.empty() || o.on_bad == BadRecord::kSkip, name, ":", line_no + 1, ": ", err);
        r.records += err.empty() ? 1 : 0;
        r.skipped += err.empty() ? 0 : 1;
        in_part += err.empty() ? 1 : 0;
    }
    if (in_part > 0 && !cancelled())
        finish_part();
    else
        part.reset();  // nothing to deliver (or the reader has stopped): no part
    return r;
}

}  // namespace zt
