// Memory timeline: a MemoryEventSink that writes each allocation and free of a pool as one JSON
// line (docs/memory-timeline.md has the format). Lines are compact (short keys, categories and
// phases as indices, module names interned once) and buffered (kBufferBytes), so a thousand
// steps of GPT-2 small stay a file of a few hundred MB. Write failures are remembered (events
// arrive in destructors, which must not throw) and reported by flush() and close().
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "tensor/memory.h"

namespace zt {

class MemoryTimeline final : public MemoryEventSink {
public:
    static constexpr size_t kBufferBytes = 4 << 20;  // 4 MiB; written out when full or on flush()

    // Creates (truncates) `path` and writes the header line. Throws zt::Error when it cannot.
    MemoryTimeline(const std::string& path, int rank);
    ~MemoryTimeline() override;  // flushes and closes, errors ignored (call close() to see them)
    MemoryTimeline(const MemoryTimeline&) = delete;
    MemoryTimeline& operator=(const MemoryTimeline&) = delete;

    void on_event(const MemoryEvent& event) noexcept override;

    // Writes out the buffer and flushes the file, so a reader tailing it sees whole lines.
    // Throws zt::Error when a write has failed (now or since the last call).
    void flush();
    // flush(), then closes the file; later events are dropped.
    void close();

    int64_t events() const;         // alloc, free and oom lines so far
    int64_t bytes_written() const;  // file size so far, buffered bytes included

private:
    void write_out_locked() noexcept;  // buffer -> file; records the first error

    mutable std::mutex mu_;
    std::FILE* file_ = nullptr;
    std::string path_;
    std::string buffer_;
    std::string error_;                 // first write error, "" if none
    std::vector<bool> module_written_;  // by module id: its {"module_id", "name"} line is out
    double start_s_ = 0;
    int64_t events_ = 0;
    int64_t bytes_ = 0;
};

}  // namespace zt
