#include "runtime/monitor/rank_figures.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "util/error.h"

namespace zt {

namespace {

// Packed as doubles (the gather's wire format): step, comm, io, skipped, stop, then current and
// peak bytes per category and the total peak. Byte counts below 2^53 travel exactly.
constexpr int kPacked = 5 + 2 * kMemCategoryCount + 1;

std::vector<double> pack(const RankFigures& f) {
    std::vector<double> v{f.step_s, f.comm_s, f.io_s, f.skipped ? 1.0 : 0.0, f.stop ? 1.0 : 0.0};
    for (int c = 0; c < kMemCategoryCount; ++c) v.push_back(static_cast<double>(f.mem.current[c]));
    for (int c = 0; c < kMemCategoryCount; ++c) v.push_back(static_cast<double>(f.mem.peak[c]));
    v.push_back(static_cast<double>(f.mem.total_peak));
    return v;
}

RankFigures unpack(const double* v) {
    RankFigures f;
    f.step_s = v[0];
    f.comm_s = v[1];
    f.io_s = v[2];
    f.skipped = v[3] != 0;
    f.stop = v[4] != 0;
    for (int c = 0; c < kMemCategoryCount; ++c) {
        f.mem.current[c] = static_cast<int64_t>(v[5 + c]);
        f.mem.peak[c] = static_cast<int64_t>(v[5 + kMemCategoryCount + c]);
        f.mem.total_current += f.mem.current[c];
    }
    f.mem.total_peak = static_cast<int64_t>(v[5 + 2 * kMemCategoryCount]);
    return f;
}

void log_own(const RankFigures& mine, int rank, int64_t step) {
    const char* dir = std::getenv("ZT_MONITOR_RANK_LOG");
    if (!dir || !*dir || step <= 0) return;
    std::filesystem::create_directories(dir);
    const std::string path = str_cat(dir, "/rank_", rank, ".jsonl");
    nlohmann::json j = rank_figures_json(mine, rank);
    j["step"] = step;
    std::ofstream out(path, std::ios::app);
    out << j.dump() << "\n";
    ZT_CHECK(out.good(), "ZT_MONITOR_RANK_LOG: cannot append to ", path);
}

}  // namespace

std::vector<RankFigures> gather_rank_figures(Communicator* comm, const RankFigures& mine,
                                             int64_t log_step) {
    const int ranks = comm ? comm->size() : 1;
    log_own(mine, comm ? comm->rank() : 0, log_step);
    if (ranks == 1) return {mine};
    const std::vector<double> v = pack(mine);
    std::vector<double> all(v.size() * static_cast<size_t>(ranks));
    comm->all_gather(v.data(), all.data(),
                     std::vector<int64_t>(static_cast<size_t>(ranks), kPacked), CommType::kF64)
        ->wait();
    std::vector<RankFigures> out;
    for (int r = 0; r < ranks; ++r) out.push_back(unpack(all.data() + static_cast<size_t>(r) * kPacked));
    return out;
}

nlohmann::json rank_figures_json(const RankFigures& f, int rank) {
    nlohmann::json mem;
    for (int c = 0; c < kMemCategoryCount; ++c)
        mem[mem_category_name(static_cast<MemCategory>(c))] = f.mem.current[c];
    mem["peak"] = f.mem.total_peak;
    return {{"rank", rank},       {"step_s", f.step_s}, {"compute_s", f.compute_s()},
            {"comm_s", f.comm_s}, {"io_s", f.io_s},     {"skipped", f.skipped},
            {"mem", mem}};
}

double median_busy_s(std::span<const RankFigures> ranks) {
    std::vector<double> busy;
    for (const RankFigures& f : ranks) busy.push_back(f.busy_s());
    if (busy.empty()) return 0;
    std::sort(busy.begin(), busy.end());
    const size_t n = busy.size();
    return n % 2 ? busy[n / 2] : 0.5 * (busy[n / 2 - 1] + busy[n / 2]);
}

std::vector<int> find_stragglers(std::span<const RankFigures> ranks, double factor) {
    std::vector<int> out;
    if (ranks.size() < 2) return out;
    const double median = median_busy_s(ranks);
    for (size_t r = 0; r < ranks.size(); ++r)
        if (ranks[r].busy_s() > factor * median) out.push_back(static_cast<int>(r));
    return out;
}

double slow_rank_delay_s(int rank) {
    const char* v = std::getenv("ZT_FAULT_SLOW_RANK");
    if (!v || !*v) return 0;
    const std::string s = v;
    const size_t colon = s.find(':');
    ZT_CHECK(colon != std::string::npos, "ZT_FAULT_SLOW_RANK: expected RANK:SECONDS (\"1:0.05\"), "
             "got \"", s, "\"");
    char* end = nullptr;
    const long r = std::strtol(s.c_str(), &end, 10);
    const double sec = std::strtod(s.c_str() + colon + 1, &end);
    ZT_CHECK(*end == '\0' && sec >= 0, "ZT_FAULT_SLOW_RANK: expected RANK:SECONDS with seconds >= "
             "0, got \"", s, "\"");
    return r == rank ? sec : 0;
}

}  // namespace zt
