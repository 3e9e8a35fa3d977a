// TensorBoard event files written natively (no TensorFlow): TFRecord framing (uint64 length,
// masked CRC-32C of the length, the data, masked CRC-32C of the data) around Event protobufs
// encoded by hand. The first record is the file_version event "brain.Event:2"; each figure is
// an Event{wall_time, step, summary{value{tag, simple_value}}}. simple_value is a float, so
// values read back rounded to float.
#pragma once

#include <cstdio>
#include <string>

#include "runtime/monitor/sink.h"

namespace zt {

class TensorBoardSink : public MonitorSink {
public:
    // Creates `dir` and events.out.tfevents.TIME.HOST.PID inside it.
    explicit TensorBoardSink(const std::string& dir);
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

}  // namespace zt
