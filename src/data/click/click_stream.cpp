#include "data/click/click_stream.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "util/error.h"

namespace zt {

namespace fs = std::filesystem;

ClickStream::ClickStream(ClickStreamOptions opts) : opts_(std::move(opts)) {
    ZT_CHECK(fs::is_directory(opts_.dir), "data.path: ", opts_.dir,
             " is not a directory (a stream reads the ZTCLICK parts arriving there)");
    ZT_CHECK(opts_.idle_timeout_s >= 0, "data.idle_timeout_s: expected >= 0, got ",
             opts_.idle_timeout_s);
    scan();
}

int ClickStream::scan() {
    std::vector<std::string> names;
    for (const fs::directory_entry& e : fs::directory_iterator(opts_.dir)) {
        const std::string name = e.path().filename().string();
        if (e.is_regular_file() && e.path().extension() == ".ztclick") names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    int added = 0;
    for (const std::string& name : names) {
        if (!parts_.empty() && name <= parts_.back().name) {
            const auto it =
                std::lower_bound(parts_.begin(), parts_.end(), name,
                                 [](const Part& q, const std::string& n) { return q.name < n; });
            const bool read = it != parts_.end() && it->name == name;  // parts_ is in name order
            ZT_CHECK(read, "data.path: part ", name, " arrived in ", opts_.dir, " after ",
                     parts_.back().name, " was read; parts must arrive in name order");
            continue;
        }
        Part p;
        p.name = name;
        const std::string path = (fs::path(opts_.dir) / name).string();
        p.file = CtrFile::open(path);
        ZT_CHECK(p.file->records() >= 1, "data.path: part ", path, " holds no records");
        ClickDatasetOptions o;
        o.shuffle = false;
        p.records = std::make_unique<ClickDataset>(p.file, o);
        p.first = records();
        p.n = p.file->records();
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0)
            p.mtime = static_cast<double>(st.st_mtim.tv_sec) +
                      1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
        parts_.push_back(std::move(p));
        ++added;
    }
    return added;
}

bool ClickStream::wait_for(int64_t end) {
    auto last_arrival = std::chrono::steady_clock::now();
    while (records() < end) {
        if (scan() > 0) {
            last_arrival = std::chrono::steady_clock::now();
            continue;
        }
        const double idle =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - last_arrival).count();
        if (idle >= opts_.idle_timeout_s) return false;
        std::this_thread::sleep_for(std::chrono::duration<double>(opts_.poll_s));
    }
    return true;
}

const ClickStream::Part& ClickStream::part_of(int64_t r) const {
    ZT_ASSERT(r >= 0 && r < records(), "stream record ", r, " of ", records());
    auto it = std::upper_bound(parts_.begin(), parts_.end(), r,
                               [](int64_t v, const Part& p) { return v < p.first; });
    return *(it - 1);
}

double ClickStream::arrival(int64_t r) const { return part_of(r).mtime; }

void ClickStream::fill(int64_t first, int64_t count, ClickBatchBuffers& out) const {
    ZT_ASSERT(count >= 1 && first + count <= records(), "stream fill [", first, ", ", first + count,
              ") of ", records(), " records");
    ClickBatchBuffers piece;
    bool empty = true;
    for (int64_t r = first; r < first + count;) {
        const Part& p = part_of(r);
        const int64_t n = std::min(first + count, p.first + p.n) - r;
        p.records->fill(r - p.first, n, empty ? out : piece);
        if (!empty) append_click_batch(out, piece);
        empty = false;
        r += n;
    }
}

void append_click_batch(ClickBatchBuffers& a, const ClickBatchBuffers& b) {
    ZT_ASSERT(a.F == b.F && a.ids.size() == b.ids.size(), "append_click_batch: layouts differ");
    a.labels.insert(a.labels.end(), b.labels.begin(), b.labels.end());
    a.dense.insert(a.dense.end(), b.dense.begin(), b.dense.end());
    for (size_t k = 0; k < a.ids.size(); ++k) {
        const int64_t base = a.offsets[k].back();
        for (size_t j = 1; j < b.offsets[k].size(); ++j)
            a.offsets[k].push_back(base + b.offsets[k][j]);
        a.ids[k].insert(a.ids[k].end(), b.ids[k].begin(), b.ids[k].end());
        a.weights[k].insert(a.weights[k].end(), b.weights[k].begin(), b.weights[k].end());
    }
    a.B += b.B;
}

}  // namespace zt
