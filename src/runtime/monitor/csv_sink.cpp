#include "runtime/monitor/csv_sink.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "checkpoint/durable_file.h"
#include "util/error.h"

namespace zt {

CsvSink::CsvSink(const std::string& dir, int64_t keep_through_step)
    : dir_(dir), keep_through_step_(keep_through_step) {
    std::filesystem::create_directories(dir);
}

CsvSink::~CsvSink() {
    for (auto& [tag, f] : files_) std::fclose(f);
}

std::FILE* CsvSink::open_tag(const std::string& tag) {
    auto it = files_.find(tag);
    if (it != files_.end()) return it->second;
    std::string file = tag;
    for (char& c : file)
        if (c == '/' || c == ' ') c = '_';
    const std::string path = dir_ + "/" + file + ".csv";
    // A resumed run keeps the header and the rows of steps it has already done.
    // Only whole lines: one cut short by a kill would read as a wrong value. The kept lines
    // replace the file in one rename, so a kill while they are written back loses none.
    std::string kept;
    if (keep_through_step_ >= 0) {
        std::ifstream in(path, std::ios::binary);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        size_t begin = 0;
        for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
            const std::string line = text.substr(begin, end - begin);
            if (begin == 0 || std::strtoll(line.c_str(), nullptr, 10) <= keep_through_step_)
                kept += line + "\n";
        }
    }
    if (kept.empty()) kept = "step," + tag.substr(tag.rfind('/') + 1) + "\n";
    write_file_atomic(path, kept);
    std::FILE* f = std::fopen(path.c_str(), "a");
    ZT_CHECK(f != nullptr, "csv_monitor: cannot create ", path, ": ", std::strerror(errno),
             "; check csv_monitor.output_path");
    files_[tag] = f;
    return f;
}

void CsvSink::row(const std::string& tag, int64_t step, double value) {
    std::FILE* f = open_tag(tag);
    ZT_CHECK(std::fprintf(f, "%lld,%.17g\n", static_cast<long long>(step), value) > 0,
             "csv_monitor: write to ", dir_, " failed: ", std::strerror(errno));
}

void CsvSink::write(const MonitorRecord& r) {
    for (const MonitorScalar& s : r.scalars) row(monitor_tag(s.name), r.step, s.value);
    for (size_t rank = 0; rank < r.ranks.size(); ++rank)
        for (const MonitorScalar& s : r.ranks[rank])
            row(monitor_rank_tag(rank, s.name), r.step, s.value);
    for (auto& [tag, f] : files_)
        ZT_CHECK(std::fflush(f) == 0, "csv_monitor: write to ", dir_, " failed: ",
                 std::strerror(errno));
}

}  // namespace zt
