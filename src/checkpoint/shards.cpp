#include "checkpoint/shards.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
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
                           const std::vector<const float*>& data) {
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
    const WrittenFile wf = w.write(dir + "/" + f.file);
    f.bytes = wf.bytes;
    f.crc32c = wf.crc32c;
    return f;
}

void verify_shard(const std::string& dir, const CheckpointFile& f) {
    const std::string path = dir + "/" + f.file;
    SysFd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    ZT_CHECK(fd.fd >= 0, "checkpoint shard ", path, ": cannot open: ", std::strerror(errno));
    struct stat st{};
    ZT_CHECK(::fstat(fd.fd, &st) == 0, "checkpoint shard ", path, ": cannot stat");
    ZT_CHECK(static_cast<uint64_t>(st.st_size) == f.bytes, "checkpoint shard ", path, " has ",
             st.st_size, " bytes, the manifest says ", f.bytes, " (truncated or replaced)");
    std::vector<char> buf(size_t{1} << 20);
    uint32_t crc = 0;
    uint64_t seen = 0;
    for (;;) {
        const ssize_t n = ::read(fd.fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        ZT_CHECK(n >= 0, "checkpoint shard ", path, ": cannot read: ", std::strerror(errno));
        if (n == 0) break;
        crc = crc32c_extend(crc, buf.data(), static_cast<size_t>(n));
        seen += static_cast<uint64_t>(n);
    }
    ZT_CHECK(seen == f.bytes, "checkpoint shard ", path, " changed while being read");
    ZT_CHECK(crc == f.crc32c, "checkpoint shard ", path, " is corrupted: CRC-32C ", crc,
             ", the manifest says ", f.crc32c);
}

ShardReader::ShardReader(std::string dir, const Manifest& manifest)
    : dir_(std::move(dir)), m_(manifest) {}

const SafetensorsFile& ShardReader::open(size_t index) {
    auto it = open_.find(index);
    if (it != open_.end()) return *it->second;
    const CheckpointFile& f = m_.files[index];
    verify_shard(dir_, f);
    auto file = std::make_unique<SafetensorsFile>(dir_ + "/" + f.file);
    for (const std::string& name : m_.tensors) {
        const SafetensorsTensor* t = file->find(name);
        ZT_CHECK(t != nullptr, "checkpoint shard ", dir_, "/", f.file, ": no tensor \"", name,
                 "\"");
        ZT_CHECK(t->dtype == "F32" && t->shape == std::vector<int64_t>{f.hi - f.lo},
                 "checkpoint shard ", dir_, "/", f.file, ": tensor \"", name,
                 "\" is not F32 of ", f.hi - f.lo, " elements");
    }
    return *open_.emplace(index, std::move(file)).first->second;
}

void ShardReader::read(const std::string& name, int64_t lo, int64_t hi, float* out) {
    ZT_ASSERT(lo >= 0 && hi >= lo);
    ZT_CHECK(std::find(m_.tensors.begin(), m_.tensors.end(), name) != m_.tensors.end(),
             "checkpoint ", dir_, " has no tensor \"", name, "\"");
    const int64_t data_hi = std::min(hi, m_.numel);
    if (data_hi < hi) std::fill(out + std::max<int64_t>(0, data_hi - lo), out + (hi - lo), 0.0f);
    for (size_t i = 0; i < m_.files.size(); ++i) {
        const CheckpointFile& f = m_.files[i];
        const int64_t b = std::max(lo, f.lo), e = std::min(data_hi, f.hi);
        if (b >= e) continue;
        std::span<const std::byte> bytes = open(i).data(name);
        std::memcpy(out + (b - lo), bytes.data() + (b - f.lo) * sizeof(float),
                    static_cast<size_t>(e - b) * sizeof(float));
    }
}

}  // namespace zt
