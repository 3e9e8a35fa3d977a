#include "checkpoint/shards.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include "checkpoint/durable_file.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace zt {

std::string shard_file_name(int rank) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "rank_%05d.safetensors", rank);
    return buf;
}

CheckpointFile write_shard(const std::string& dir, int rank, int64_t lo, int64_t hi,
                           const std::vector<std::string>& names,
                           const std::vector<const float*>& data, const DirectIoOptions& io) {
    ZT_ASSERT(names.size() == data.size() && hi >= lo);
    SafetensorsWriter w;
    const size_t bytes = static_cast<size_t>(hi - lo) * sizeof(float);
    for (size_t i = 0; i < names.size(); ++i) w.add(names[i], "F32", {hi - lo}, data[i], bytes);
    w.add_metadata("rank", std::to_string(rank));
    w.add_metadata("range", std::to_string(lo) + "," + std::to_string(hi));
    CheckpointFile f;
    f.file = shard_file_name(rank);
    f.rank = rank;
    f.lo = lo;
    f.hi = hi;
    const WrittenFile wf = w.write(dir + "/" + f.file, io);
    f.bytes = wf.bytes;
    f.crc32c = wf.crc32c;
    return f;
}

namespace {

// The manifest's size of a shard against the file's.
void check_shard_size(const std::string& path, const CheckpointFile& f) {
    struct stat st{};
    ZT_CHECK(::stat(path.c_str(), &st) == 0, "checkpoint shard ", path, ": cannot open: ",
             std::strerror(errno));
    ZT_CHECK(static_cast<uint64_t>(st.st_size) == f.bytes, "checkpoint shard ", path, " has ",
             st.st_size, " bytes, the manifest says ", f.bytes, " (truncated or replaced)");
}

void check_shard_crc(const std::string& path, const CheckpointFile& f, uint32_t crc) {
    ZT_CHECK(crc == f.crc32c, "checkpoint shard ", path, " is corrupted: CRC-32C ", crc,
             ", the manifest says ", f.crc32c);
}

// One queued copy out of a shard: file bytes [begin, end) go to dst.
struct Segment {
    uint64_t begin, end;
    std::byte* dst;
};

}  // namespace

void verify_shard(const std::string& dir, const CheckpointFile& f, const DirectIoOptions& io) {
    const std::string path = dir + "/" + f.file;
    check_shard_size(path, f);
    uint32_t crc = 0;
    auto extend = [&](uint64_t, std::span<const std::byte> c) {
        crc = crc32c_extend(crc, c.data(), c.size());
    };
    read_file_sequential(path, f.bytes, extend, io);
    check_shard_crc(path, f, crc);
}

ShardReader::ShardReader(std::string dir, const Manifest& manifest, DirectIoOptions io)
    : dir_(std::move(dir)), m_(manifest), io_(io) {}

void ShardReader::add(const std::string& name, int64_t lo, int64_t hi, float* out) {
    ZT_ASSERT(lo >= 0 && hi >= lo);
    ZT_CHECK(std::find(m_.tensors.begin(), m_.tensors.end(), name) != m_.tensors.end(),
             "checkpoint ", dir_, " has no tensor \"", name, "\"");
    const int64_t data_hi = std::min(hi, m_.numel);
    if (data_hi < hi) std::fill(out + std::max<int64_t>(0, data_hi - lo), out + (hi - lo), 0.0f);
    queue_.push_back({name, lo, data_hi, out});
}

void ShardReader::read(const std::string& name, int64_t lo, int64_t hi, float* out) {
    add(name, lo, hi, out);
    run();
}

void ShardReader::run() {
    std::vector<Request> queue = std::move(queue_);
    queue_.clear();
    for (const CheckpointFile& f : m_.files) {
        const bool needed = std::any_of(queue.begin(), queue.end(), [&](const Request& r) {
            return std::max(r.lo, f.lo) < std::min(r.hi, f.hi);
        });
        if (needed) read_shard(f, queue);
    }
}

// Streams one shard: the header is gathered from the first chunks and validated (Note
// [Safetensors validation]), then each queued range's bytes are copied out as they pass. A header
// error is reported only when the CRC matches: a damaged file is named as corrupted first.
void ShardReader::read_shard(const CheckpointFile& f, const std::vector<Request>& queue) {
    const std::string path = dir_ + "/" + f.file;
    check_shard_size(path, f);
    std::vector<std::byte> head;
    uint64_t header_end = 0;
    bool parsed = false;
    std::exception_ptr header_error;
    std::vector<Segment> segments;
    uint32_t crc = 0;
    auto parse_header = [&] {
        const SafetensorsFile h = SafetensorsFile::header_only(head, f.bytes, path);
        for (const std::string& name : m_.tensors) {
            const SafetensorsTensor* t = h.find(name);
            ZT_CHECK(t != nullptr, "checkpoint shard ", path, ": no tensor \"", name, "\"");
            ZT_CHECK(t->dtype == "F32" && t->shape == std::vector<int64_t>{f.hi - f.lo},
                     "checkpoint shard ", path, ": tensor \"", name, "\" is not F32 of ",
                     f.hi - f.lo, " elements");
        }
        for (const Request& r : queue) {
            const int64_t b = std::max(r.lo, f.lo), e = std::min(r.hi, f.hi);
            if (b >= e) continue;
            const uint64_t at = h.data_begin() + h.find(r.name)->begin +
                                static_cast<uint64_t>(b - f.lo) * sizeof(float);
            segments.push_back({at, at + static_cast<uint64_t>(e - b) * sizeof(float),
                                reinterpret_cast<std::byte*>(r.out + (b - r.lo))});
        }
    };
    read_file_sequential(
        path, f.bytes,
        [&](uint64_t off, std::span<const std::byte> c) {
            crc = crc32c_extend(crc, c.data(), c.size());
            for (size_t pos = 0; !parsed && !header_error && pos < c.size();) {
                const uint64_t need = header_end == 0 ? 8 : header_end;
                const size_t take = static_cast<size_t>(
                    std::min<uint64_t>(need - head.size(), c.size() - pos));
                head.insert(head.end(), c.begin() + static_cast<std::ptrdiff_t>(pos),
                            c.begin() + static_cast<std::ptrdiff_t>(pos + take));
                pos += take;
                try {
                    if (header_end == 0 && head.size() == 8)
                        header_end = safetensors_header_end(head, f.bytes, path);
                    if (header_end != 0 && head.size() == header_end) {
                        parse_header();
                        parsed = true;
                    }
                } catch (...) {
                    header_error = std::current_exception();
                }
            }
            if (!parsed) return;
            const uint64_t end = off + c.size();
            for (const Segment& s : segments) {
                const uint64_t b = std::max(s.begin, off), e = std::min(s.end, end);
                if (b < e) std::memcpy(s.dst + (b - s.begin), c.data() + (b - off), e - b);
            }
        },
        io_);
    check_shard_crc(path, f, crc);
    if (header_error) std::rethrow_exception(header_error);
    ZT_CHECK(parsed, "checkpoint shard ", path, ": ends inside its header");
}

}  // namespace zt
