#include "runtime/monitor/tensorboard_sink.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "util/crc32c.h"
#include "util/error.h"

namespace zt {

namespace {

// Protobuf wire format (little-endian): a key is (field << 3) | wire type; 0 varint,
// 1 fixed64, 2 length-delimited, 5 fixed32.
void put_varint(std::string& s, uint64_t v) {
    while (v >= 0x80) {
        s.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    s.push_back(static_cast<char>(v));
}
void put_fixed(std::string& s, const void* p, size_t n) {  // x86-64: already little-endian
    s.append(static_cast<const char*>(p), n);
}
void put_bytes(std::string& s, int field, const std::string& b) {
    put_varint(s, static_cast<uint64_t>(field) << 3 | 2);
    put_varint(s, b.size());
    s += b;
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5.
std::string event_header(double wall_time, int64_t step) {
    std::string e;
    put_varint(e, 1 << 3 | 1);
    put_fixed(e, &wall_time, 8);
    if (step != 0) {
        put_varint(e, 2 << 3 | 0);
        put_varint(e, static_cast<uint64_t>(step));
    }
    return e;
}

}  // namespace

uint32_t tfrecord_masked_crc(const void* data, size_t n) {
    const uint32_t crc = crc32c(data, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord_frame(const std::string& data) {
    std::string f;
    const uint64_t len = data.size();
    put_fixed(f, &len, 8);
    const uint32_t len_crc = tfrecord_masked_crc(&len, 8);
    put_fixed(f, &len_crc, 4);
    f += data;
    const uint32_t data_crc = tfrecord_masked_crc(data.data(), data.size());
    put_fixed(f, &data_crc, 4);
    return f;
}

// Summary: value = 1 (repeated); Summary.Value: tag = 1 (string), simple_value = 2 (float).
std::string tensorboard_scalar_event(double wall_time, int64_t step, const std::string& tag,
                                     float value) {
    std::string v;
    put_bytes(v, 1, tag);
    put_varint(v, 2 << 3 | 5);
    put_fixed(v, &value, 4);
    std::string summary;
    put_bytes(summary, 1, v);
    std::string e = event_header(wall_time, step);
    put_bytes(e, 5, summary);
    return e;
}

TensorBoardSink::TensorBoardSink(const std::string& dir) {
    std::filesystem::create_directories(dir);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    const double now = static_cast<double>(std::time(nullptr));
    path_ = str_cat(dir, "/events.out.tfevents.", static_cast<int64_t>(now), ".", host, ".",
                    static_cast<int64_t>(getpid()));
    file_ = std::fopen(path_.c_str(), "wb");
    ZT_CHECK(file_ != nullptr, "tensorboard: cannot create ", path_, ": ", std::strerror(errno),
             "; check tensorboard.output_path");
    std::string e = event_header(now, 0);
    put_bytes(e, 3, "brain.Event:2");
    append_record(e);
}

TensorBoardSink::~TensorBoardSink() {
    if (file_) std::fclose(file_);
}

void TensorBoardSink::append_record(const std::string& data) {
    const std::string f = tfrecord_frame(data);
    ZT_CHECK(std::fwrite(f.data(), 1, f.size(), file_) == f.size(),
             "tensorboard: write to ", path_, " failed: ", std::strerror(errno));
}

void TensorBoardSink::write(const MonitorRecord& r) {
    for (const MonitorScalar& s : r.scalars)
        append_record(tensorboard_scalar_event(r.wall_time, r.step, monitor_tag(s.name),
                                               static_cast<float>(s.value)));
    for (size_t rank = 0; rank < r.ranks.size(); ++rank)
        for (const MonitorScalar& s : r.ranks[rank])
            append_record(tensorboard_scalar_event(r.wall_time, r.step,
                                                   monitor_rank_tag(rank, s.name),
                                                   static_cast<float>(s.value)));
    ZT_CHECK(std::fflush(file_) == 0, "tensorboard: write to ", path_, " failed: ",
             std::strerror(errno));
}

}  // namespace zt
