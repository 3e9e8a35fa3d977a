// TensorBoard event files written natively (no TensorFlow): TFRecord framing (uint64 length,
// masked CRC-32C of the length, the data, masked CRC-32C of the data) around Event protobufs
// encoded by hand. The first record is the file_version event "brain.Event:2"; each figure is
// an Event{wall_time, step, summary{value{tag, simple_value}}}. simple_value is a float, so
// values read back rounded to float. A resumed run first cuts the directory's earlier event files
// back to the step it resumed from (Note [TensorBoard on resume]), so readers see each step once.
#pragma once

#include <cstdio>
#include <string>

#include "runtime/monitor/sink.h"

namespace zt {

class TensorBoardSink : public MonitorSink {
public:
    // Creates `dir` and events.out.tfevents.TIME.HOST.PID inside it. resumed_from >= 0: a resumed
    // run, which first drops the events past that step from the event files already in `dir`.
    explicit TensorBoardSink(const std::string& dir, int64_t resumed_from = -1);
    ~TensorBoardSink() override;
    TensorBoardSink(const TensorBoardSink&) = delete;
    TensorBoardSink& operator=(const TensorBoardSink&) = delete;

    void write(const MonitorRecord& record) override;
    const std::string& path() const { return path_; }

private:
    void append_record(const std::string& data);

    std::FILE* file_ = nullptr;
    std::string path_;
};

// The pieces, exposed for tests: one Event with a scalar, and one TFRecord frame.
std::string tensorboard_scalar_event(double wall_time, int64_t step, const std::string& tag,
                                     float value);
std::string tfrecord_frame(const std::string& data);
uint32_t tfrecord_masked_crc(const void* data, size_t n);
// Rewrites the event file at `path` without the events of steps past `last_step` (atomically:
// a temporary file renamed over it). Returns the events dropped. A torn last record (a crash
// mid-write) is dropped too; a file that is not TFRecord is left alone (returns 0).
int64_t truncate_event_file(const std::string& path, int64_t last_step);

}  // namespace zt
