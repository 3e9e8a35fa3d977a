// direct_io_bench: where a checkpoint write's time goes. Writes and reads back --mib MiB through
// checkpoint/direct_io.h at each queue depth of --depths (O_DIRECT + io_uring, as checkpoints do;
// --buffered for the page cache), and times the CPU work alone: memcpy into a chunk buffer and
// CRC-32C over it. One line per measurement; median of --reps. docs/benchmarks-checkpoint.md.
//
//   build/bench/direct_io_bench --dir /tmp --mib 1536 --depths 1,2,4,8 --reps 3
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/direct_io.h"
#include "util/crc32c.h"
#include "util/timer.h"

namespace {

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

void evict(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
    std::string dir = "/tmp", depths = "1,2,4,8";
    size_t mib = 1536;
    int reps = 3;
    bool direct = true;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
        if (a == "--dir")
            dir = next();
        else if (a == "--mib")
            mib = std::stoul(next());
        else if (a == "--depths")
            depths = next();
        else if (a == "--reps")
            reps = std::stoi(next());
        else if (a == "--buffered")
            direct = false;
        else {
            std::fprintf(stderr,
                         "usage: %s [--dir D] [--mib N] [--depths 1,2,4] [--reps R] "
                         "[--buffered]\n",
                         argv[0]);
            return 2;
        }
    }
    const size_t bytes = mib << 20;
    std::vector<char> src(bytes);
    for (size_t i = 0; i < bytes; ++i) src[i] = static_cast<char>(i * 2654435761u >> 13);
    const std::string path = dir + "/zt_direct_io_bench.bin";

    // CPU alone: what the writer does per chunk besides the I/O.
    const size_t chunk = zt::DirectIoOptions{}.chunk_bytes;
    std::vector<char> buf(chunk);
    std::vector<double> cp, crc;
    for (int r = 0; r < reps; ++r) {
        zt::Stopwatch a;
        for (size_t o = 0; o < bytes; o += chunk) std::memcpy(buf.data(), src.data() + o, chunk);
        cp.push_back(a.elapsed_s());
        zt::Stopwatch b;
        uint32_t c = 0;
        for (size_t o = 0; o < bytes; o += chunk) c = zt::crc32c_extend(c, src.data() + o, chunk);
        crc.push_back(b.elapsed_s());
        if (c == 1) std::printf(" ");  // keep the loop
    }
    std::printf("memcpy into an 8 MiB buffer: %.0f MB/s\n", bytes / median(cp) / 1e6);
    std::printf("crc32c: %.0f MB/s\n", bytes / median(crc) / 1e6);

    for (size_t at = 0; at < depths.size();) {
        size_t end = depths.find(',', at);
        if (end == std::string::npos) end = depths.size();
        const int depth = std::stoi(depths.substr(at, end - at));
        at = end + 1;
        const zt::DirectIoOptions o{direct, true, chunk, depth};
        std::vector<double> w, rd;
        zt::DirectIoReport rep;
        for (int r = 0; r < reps; ++r) {
            zt::Stopwatch a;
            zt::DirectFileWriter f(path, o);
            f.append(src.data(), bytes);
            f.finish();
            w.push_back(a.elapsed_s());
            rep = f.report();
            evict(path);
            uint32_t c = 0;
            zt::Stopwatch b;
            zt::read_file_sequential(
                path, bytes,
                [&](uint64_t, std::span<const std::byte> s) {
                    c = zt::crc32c_extend(c, s.data(), s.size());
                },
                o);
            rd.push_back(b.elapsed_s());
            ::unlink(path.c_str());
        }
        std::printf("depth %d (%s%s): write+crc+fsync %.0f MB/s, cold read+crc %.0f MB/s\n", depth,
                    rep.direct ? "O_DIRECT" : "page cache", rep.uring ? ", io_uring" : "",
                    bytes / median(w) / 1e6, bytes / median(rd) / 1e6);
    }
    return 0;
}
