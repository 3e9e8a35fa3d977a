// CSV files as DeepSpeed's csv_monitor writes them: one file per figure, DIR/<tag>.csv with the
// tag's '/' and ' ' made '_' ("train_loss.csv", "rank1_step_time_s.csv"), a header row
// "step,<the tag's last part>" and one "step,value" row per record. A resumed run keeps the rows
// up to the step it resumed from and appends after them; a fresh run starts each file anew.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "runtime/monitor/sink.h"

namespace zt {

class CsvSink : public MonitorSink {
public:
    // keep_through_step >= 0: a resumed run (see above); -1: a fresh one.
    CsvSink(const std::string& dir, int64_t keep_through_step);
    ~CsvSink() override;
    CsvSink(const CsvSink&) = delete;
    CsvSink& operator=(const CsvSink&) = delete;

    void write(const MonitorRecord& record) override;

private:
    std::FILE* open_tag(const std::string& tag);
    void row(const std::string& tag, int64_t step, double value);

    std::string dir_;
    int64_t keep_through_step_;
    std::map<std::string, std::FILE*> files_;  // by tag, owned
};

}  // namespace zt
