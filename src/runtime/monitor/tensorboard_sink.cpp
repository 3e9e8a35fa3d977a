#include "runtime/monitor/tensorboard_sink.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

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

// The step of an Event (field 2, varint), 0 when absent; nullopt when the bytes are not an Event.
std::optional<int64_t> event_step(const std::string& e) {
    size_t at = 0;
    auto varint = [&](uint64_t& v) {
        v = 0;
        for (int shift = 0; shift < 64 && at < e.size(); shift += 7) {
            const auto b = static_cast<unsigned char>(e[at++]);
            v |= static_cast<uint64_t>(b & 0x7f) << shift;
            if ((b & 0x80) == 0) return true;
        }
        return false;
    };
    int64_t step = 0;
    while (at < e.size()) {
        uint64_t key = 0, v = 0;
        if (!varint(key)) return std::nullopt;
        switch (key & 7) {
            case 0:
                if (!varint(v)) return std::nullopt;
                if (key >> 3 == 2) step = static_cast<int64_t>(v);
                break;
            case 1: at += 8; break;
            case 5: at += 4; break;
            case 2:
                if (!varint(v) || v > e.size() - at) return std::nullopt;
                at += v;
                break;
            default: return std::nullopt;
        }
        if (at > e.size()) return std::nullopt;
    }
    return step;
}

}  // namespace

// Note [TensorBoard on resume]: a run that failed at step 56 and resumed from its checkpoint at
// step 50 logs steps 51-56 again. Each run writes its own event file, and readers merge a
// directory's files, so the first run's events past the resumed step are dropped from its file
// when the second starts (TensorBoard's own answer, a SessionLog.START event that purges later
// steps, is honoured by its EventAccumulator only; other readers would show both).
int64_t truncate_event_file(const std::string& path, int64_t last_step) {
    std::string kept, data;
    {
        std::ifstream in(path, std::ios::binary);
        if (!in) return 0;
        data.assign(std::istreambuf_iterator<char>(in), {});
    }
    int64_t dropped = 0;
    size_t at = 0;
    while (data.size() - at >= 12) {
        uint64_t len = 0;
        std::memcpy(&len, data.data() + at, 8);
        uint32_t len_crc = 0;
        std::memcpy(&len_crc, data.data() + at + 8, 4);
        if (len_crc != tfrecord_masked_crc(&len, 8)) return 0;  // not TFRecord: left alone
        if (len > data.size() - at - 16) break;                  // torn record at the end
        const std::string e = data.substr(at + 12, len);
        const std::optional<int64_t> step = event_step(e);
        if (step && *step <= last_step)
            kept += data.substr(at, 16 + len);
        else
            ++dropped;
        at += 16 + len;
    }
    if (at != data.size()) ++dropped;
    if (dropped == 0) return 0;
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out.write(kept.data(), static_cast<std::streamsize>(kept.size()));
        ZT_CHECK(out.good(), "tensorboard: cannot rewrite ", path, " (writing ", tmp, ")");
    }
    std::filesystem::rename(tmp, path);
    return dropped;
}

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

TensorBoardSink::TensorBoardSink(const std::string& dir, int64_t resumed_from) {
    std::filesystem::create_directories(dir);
    if (resumed_from >= 0)  // Note [TensorBoard on resume]
        for (const auto& f : std::filesystem::directory_iterator(dir))
            if (f.is_regular_file() &&
                f.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
                truncate_event_file(f.path().string(), resumed_from);
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    const double now = static_cast<double>(std::time(nullptr));
    path_ = str_cat(dir, "/events.out.tfevents.", static_cast<int64_t>(now), ".", host, ".",
                    static_cast<int64_t>(getpid()));
    // The same second and pid (a resume inside one process): a new file all the same, named after.
    for (int k = 1; std::filesystem::exists(path_); ++k)
        path_ = str_cat(dir, "/events.out.tfevents.", static_cast<int64_t>(now), ".", host, ".",
                        static_cast<int64_t>(getpid()), ".", k);
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
