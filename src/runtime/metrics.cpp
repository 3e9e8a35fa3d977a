#include "runtime/metrics.h"

#include <fstream>

#include <cerrno>
#include <cstring>

#include "checkpoint/durable_file.h"
#include "util/error.h"

namespace zt {

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_through_step) : path_(path) {
    std::string kept;
    if (keep_through_step >= 0) {
        std::ifstream in(path);
        std::string line;
        while (std::getline(in, line)) {
            nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
            if (j.is_object() && !j.contains("error") && j.contains("step") &&
                j["step"].is_number_integer() && j["step"].get<int64_t>() <= keep_through_step)
                kept += line + "\n";
        }
    }
    // A resumed run replaces the file by its kept lines in one rename: truncating it in place
    // would lose every line if the process were killed before they were written back.
    if (keep_through_step >= 0) write_file_atomic(path, kept);
    file_ = std::fopen(path.c_str(), keep_through_step >= 0 ? "a" : "w");
    ZT_CHECK(file_ != nullptr, "metrics: cannot open ", path, " for writing: ", std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
    if (file_) std::fclose(file_);
}

void MetricsWriter::write(const nlohmann::json& line) {
    std::string s = line.dump() + "\n";
    ZT_IO_CHECK(std::fwrite(s.data(), 1, s.size(), file_) == s.size() && std::fflush(file_) == 0,
             "metrics: write to ", path_, " failed: ", std::strerror(errno));
}

nlohmann::json memory_json(const MemoryStats& stats) {
    nlohmann::json j;
    for (int c = 0; c < kMemCategoryCount; ++c)
        j[mem_category_name(static_cast<MemCategory>(c))] = stats.current[c];
    j["peak"] = stats.total_peak;
    // Held from the system (live plus cached blocks) and its unused part, the fragmentation.
    j["reserved"] = stats.reserved;
    j["fragmentation"] = stats.reserved - stats.total_current;
    return j;
}

}  // namespace zt
