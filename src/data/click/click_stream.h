// Click records that keep arriving (docs/streaming.md): a directory of ZTCLICK part files, read in
// file-name order (synth_ctr_stream.h names parts part-NNNNNN.ztclick; a shipper that writes
// PATH.tmp and renames it is read only once whole). Record r of the stream is the r-th record of
// the parts in that order, so a training position is one number, and a run resumed from a
// checkpoint at step s reads from exactly the record after those it had trained on. A part that
// arrives with a name sorting before one already read is an error (it would renumber the stream).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/click/click_dataset.h"
#include "data/click/ctr_file.h"

namespace zt {

struct ClickStreamOptions {
    std::string dir;
    double idle_timeout_s = 10;  // the stream has ended when no part arrives for this long
    double poll_s = 0.02;        // how often the directory is listed while waiting
};

class ClickStream {
  public:
    // Lists the parts present; none yet is fine (wait_for waits for them).
    explicit ClickStream(ClickStreamOptions opts);

    // Blocks until records [0, end) have arrived (true), or until no part arrived for
    // idle_timeout_s while waiting (false: the stream ended before `end`).
    bool wait_for(int64_t end);
    // Records [first, first + count) into out; they must have arrived (wait_for).
    void fill(int64_t first, int64_t count, ClickBatchBuffers& out) const;

    int64_t records() const { return parts_.empty() ? 0 : parts_.back().first + parts_.back().n; }
    int64_t parts() const { return static_cast<int64_t>(parts_.size()); }
    const CtrFile& part(int64_t p) const { return *parts_[static_cast<size_t>(p)].file; }
    // When the part holding record r arrived: its file's modification time, seconds since the
    // Unix epoch (what freshness is measured from).
    double arrival(int64_t r) const;
    const std::string& dir() const { return opts_.dir; }

  private:
    struct Part {
        std::string name;
        std::shared_ptr<const CtrFile> file;
        std::unique_ptr<ClickDataset> records;  // in file order
        int64_t first = 0, n = 0;
        double mtime = 0;
    };
    // Opens the parts that arrived since the last scan; returns how many.
    int scan();
    const Part& part_of(int64_t r) const;

    ClickStreamOptions opts_;
    std::vector<Part> parts_;
};

// Appends b's records after a's (same dense width and tables).
void append_click_batch(ClickBatchBuffers& a, const ClickBatchBuffers& b);

}  // namespace zt
