#include "data/click/synth_ctr_stream.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "util/error.h"

namespace zt {

std::string stream_part_name(int64_t p) {
    char name[48];
    std::snprintf(name, sizeof name, "part-%06lld.ztclick", static_cast<long long>(p));
    return name;
}

void write_synth_stream(const SynthStreamOptions& opts, const std::string& dir,
                        const std::function<void(int64_t, const std::string&)>& on_part) {
    ZT_CHECK(opts.files >= 1 && opts.records_per_file >= 1 && opts.first_file >= 0,
             "synth-ctr --stream: files and records per file must be >= 1 (got ", opts.files,
             " and ", opts.records_per_file, ")");
    ZT_CHECK(opts.rate >= 0, "synth-ctr --stream: rate must be >= 0 records/s, got ", opts.rate);
    std::filesystem::create_directories(dir);
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < opts.files; ++i) {
        const int64_t p = opts.first_file + i;
        auto cancelled = [&] { return opts.cancel != nullptr && opts.cancel->load(); };
        if (opts.rate > 0 && i > 0) {  // part i is due when i parts' records have been "seen"
            const auto due =
                start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(
                                static_cast<double>(i * opts.records_per_file) / opts.rate));
            while (!cancelled() && std::chrono::steady_clock::now() < due)
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        if (cancelled()) return;
        SynthCtrOptions o = opts.records;
        o.records = opts.records_per_file;
        o.eval_records = 0;
        o.first_record = p * opts.records_per_file;
        const std::string path = (std::filesystem::path(dir) / stream_part_name(p)).string();
        write_synth_ctr(o, path);
        if (on_part) on_part(p, path);
    }
}

}  // namespace zt
