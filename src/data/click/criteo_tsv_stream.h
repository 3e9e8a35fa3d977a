// Criteo TSV lines as a stream of ZTCLICK parts (docs/streaming.md): lines read from a file that
// keeps growing (followed like `tail -f`) or from standard input are converted as they arrive
// (criteo_tsv.h's transform) and written into a directory as parts of at most part_records
// records, a part also as soon as flush_s has passed since its first record, so a slow trickle
// still reaches the trainer (data/click/click_stream.h). A line is read only once its newline has
// arrived. Parts are named part-NNNNNN.ztclick and written as PATH.tmp, then renamed.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "data/click/criteo_tsv.h"

namespace zt {

struct TsvStreamOptions {
    std::string in;                   // a TSV file, or "-" for standard input
    std::string dir;                  // where the parts go (created if missing)
    std::vector<int64_t> table_rows;  // 26 sizes ids are hashed into
    BadRecord on_bad = BadRecord::kFatal;
    int64_t part_records = 8192;
    double flush_s = 1.0;
    // At the end of the input: false, write the last part and return (standard input, a file
    // written once); true, wait for more lines (a file that keeps growing) until `cancel`.
    bool follow = false;
    const std::atomic<bool>* cancel = nullptr;
    double poll_s = 0.02;  // follow: how often the end of the file is read again
};

struct TsvStreamResult {
    int64_t records = 0, skipped = 0, parts = 0;
};

// Runs until the input ends (follow false) or `cancel` is set; a bad line is an error naming
// IN:LINE (BadRecord::kFatal) or skipped and counted.
TsvStreamResult stream_criteo_tsv(const TsvStreamOptions& opts);

}  // namespace zt
