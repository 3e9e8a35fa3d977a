#include "runtime/comm_state_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "checkpoint/safetensors.h"
#include "util/crc32c.h"

namespace zt {

namespace {
constexpr const char* kLayoutKey = "zerotrain.comm_state.layout";
constexpr const char* kCrcKey = "zerotrain.comm_state.crc32c";
}  // namespace

std::string comm_state_file_name(int rank) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "comm_state_%05d.safetensors", rank);
    return buf;
}

CommStateCopy copy_comm_state(Engine& e) {
    CommStateCopy c;
    ResidualState& t = e.comm_state();
    c.layout = t.residual_layout();
    if (c.layout.empty()) return c;
    const std::vector<Tensor*> r = t.residuals();
    for (size_t i = 0; i < r.size(); ++i) {
        if (!r[i]->defined()) continue;  // not made yet: zeros
        const float* p = r[i]->data<float>();
        c.index.push_back(i);
        c.data.emplace_back(p, p + r[i]->numel());
    }
    return c;
}

void write_comm_state(const std::string& dir, int rank, const CommStateCopy& c) {
    if (c.empty()) return;
    SafetensorsWriter w;
    uint32_t crc = 0;
    for (size_t k = 0; k < c.index.size(); ++k) {
        const std::vector<float>& d = c.data[k];
        w.add("residual." + std::to_string(c.index[k]), "F32", {static_cast<int64_t>(d.size())},
              d.data(), d.size() * sizeof(float));
        crc = crc32c_extend(crc, d.data(), d.size() * sizeof(float));
    }
    w.add_metadata(kLayoutKey, c.layout);
    w.add_metadata(kCrcKey, std::to_string(crc));
    w.write(dir + "/" + comm_state_file_name(rank));
}

std::string read_comm_state(const std::string& dir, int rank, Engine& e) {
    ResidualState& t = e.comm_state();
    const std::string layout = t.residual_layout();
    if (layout.empty()) return {};
    const std::string path = dir + "/" + comm_state_file_name(rank);
    if (!std::filesystem::exists(path))
        return "the checkpoint holds no error-feedback residuals for this rank";
    try {
        SafetensorsFile f(path);
        const auto lay = f.metadata().find(kLayoutKey);
        if (lay == f.metadata().end() || lay->second != layout)
            return str_cat("they were written for another layout (",
                           lay == f.metadata().end() ? "none" : lay->second, "; this run: ", layout,
                           ")");
        // Every tensor read and checked before any is loaded.
        std::vector<std::pair<size_t, std::vector<float>>> read;
        uint32_t crc = 0;
        for (const SafetensorsTensor& s : f.tensors()) {  // sorted by name: write order differs
            const size_t i = std::stoul(s.name.substr(s.name.find('.') + 1));
            read.emplace_back(i, std::vector<float>(static_cast<size_t>(s.numel)));
            f.read_f32(s.name, read.back().second.data(), s.numel);
        }
        std::sort(read.begin(), read.end(),
                  [](const auto& a, const auto& b) { return a.first < b.first; });
        for (const auto& [i, d] : read)
            crc = crc32c_extend(crc, d.data(), d.size() * sizeof(float));
        const auto want = f.metadata().find(kCrcKey);
        if (want == f.metadata().end() || want->second != std::to_string(crc))
            return str_cat(path, " fails its CRC-32C check");
        for (const auto& [i, d] : read) t.load_residual(i, d);
    } catch (const std::exception& ex) {
        return str_cat(path, ": ", ex.what());
    }
    return {};
}

}  // namespace zt
