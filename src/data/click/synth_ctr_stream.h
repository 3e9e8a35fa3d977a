// A synthetic click stream (docs/streaming.md): a directory of ZTCLICK part files that arrive
// one after another, as a log shipper would deliver them. Part p is records
// [p x records_per_file, (p + 1) x records_per_file) of one stream drawn by write_synth_ctr's
// teacher (SynthCtrOptions::first_record), with the ids' popularity drifting along the stream
// (SynthCtrOptions::drift). Each part is written as PATH.tmp and renamed, so a reader never sees
// half a part; parts are named part-NNNNNN.ztclick, which sort in arrival order.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "data/click/synth_ctr.h"

namespace zt {

struct SynthStreamOptions {
    SynthCtrOptions records;  // the teacher and layout; records and eval_records are ignored
    int64_t files = 1, records_per_file = 1;
    int64_t first_file = 0;  // continue a stream: parts first_file .. first_file + files - 1
    double rate = 0;         // records per second on average (parts are spaced); 0: at once
    // Checked between parts and while waiting for the next: true stops the writer early.
    const std::atomic<bool>* cancel = nullptr;
};

// The name of part p ("part-000012.ztclick").
std::string stream_part_name(int64_t p);

// Writes the parts into `dir` (created if missing), calling on_part(p, path) after each.
void write_synth_stream(const SynthStreamOptions& opts, const std::string& dir,
                        const std::function<void(int64_t, const std::string&)>& on_part = {});

}  // namespace zt
