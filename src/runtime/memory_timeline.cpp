#include "runtime/memory_timeline.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/timer.h"

namespace zt {

namespace {
constexpr int kFormatVersion = 1;
constexpr size_t kMaxLineBytes = 512;  // event lines are < 100 bytes; module lines are names

const char* op_code(MemoryEvent::Op op) {
    switch (op) {
        case MemoryEvent::Op::kAlloc:
            return "a";
        case MemoryEvent::Op::kFree:
            return "f";
        case MemoryEvent::Op::kOom:
            return "oom";
    }
    return "?";
}
}  // namespace

MemoryTimeline::MemoryTimeline(const std::string& path, int rank) : path_(path) {
    file_ = std::fopen(path.c_str(), "w");
    ZT_CHECK(file_ != nullptr, "--memory-timeline: cannot open ", path,
             " for writing: ", std::strerror(errno));
    buffer_.reserve(kBufferBytes + kMaxLineBytes);
    start_s_ = now_s();
    nlohmann::json header = {{"memory_timeline", kFormatVersion}, {"rank", rank}};
    for (int c = 0; c < kMemCategoryCount; ++c)
        header["categories"].push_back(mem_category_name(static_cast<MemCategory>(c)));
    for (int p = 0; p < kMemPhaseCount; ++p)
        header["phases"].push_back(mem_phase_name(static_cast<MemPhase>(p)));
    header["ops"] = {{"a", "alloc"}, {"f", "free"}, {"oom", "refused allocation"}};
    buffer_ += header.dump();
    buffer_ += '\n';
    bytes_ += static_cast<int64_t>(buffer_.size());
}

MemoryTimeline::~MemoryTimeline() {
    std::lock_guard<std::mutex> lock(mu_);
    write_out_locked();
    if (file_) std::fclose(file_);
}

void MemoryTimeline::on_event(const MemoryEvent& e) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    if (file_ == nullptr) return;
    try {
        const size_t before = buffer_.size();
        if (e.module >= module_written_.size()) module_written_.resize(e.module + 1, false);
        if (!module_written_[e.module]) {
            module_written_[e.module] = true;
            buffer_ += "{\"module_id\":" + std::to_string(e.module) +
                       ",\"name\":" + nlohmann::json(*e.module_name).dump() + "}\n";
        }
        char line[160];
        int n = std::snprintf(line, sizeof line,
                              "{\"t\":%.6f,\"op\":\"%s\",\"b\":%lld,\"c\":%d,\"m\":%u,\"p\":%d}\n",
                              now_s() - start_s_, op_code(e.op), static_cast<long long>(e.bytes),
                              static_cast<int>(e.category), e.module, static_cast<int>(e.phase));
        buffer_.append(line, static_cast<size_t>(n));
        bytes_ += static_cast<int64_t>(buffer_.size() - before);
        ++events_;
    } catch (const std::exception& ex) {
        if (error_.empty()) error_ = ex.what();
    }
    if (buffer_.size() + kMaxLineBytes > kBufferBytes) write_out_locked();
}

void MemoryTimeline::write_out_locked() noexcept {
    if (buffer_.empty() || file_ == nullptr) return;
    if (error_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size())
        error_ = std::strerror(errno);
    buffer_.clear();
}

void MemoryTimeline::flush() {
    std::lock_guard<std::mutex> lock(mu_);
    write_out_locked();
    if (file_ && error_.empty() && std::fflush(file_) != 0) error_ = std::strerror(errno);
    ZT_CHECK(error_.empty(), "--memory-timeline: write to ", path_, " failed: ", error_);
}

void MemoryTimeline::close() {
    flush();
    std::lock_guard<std::mutex> lock(mu_);
    if (file_ == nullptr) return;
    int rc = std::fclose(file_);
    file_ = nullptr;
    ZT_CHECK(rc == 0, "--memory-timeline: closing ", path_, " failed: ", std::strerror(errno));
}

int64_t MemoryTimeline::events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
}

int64_t MemoryTimeline::bytes_written() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
}

}  // namespace zt
