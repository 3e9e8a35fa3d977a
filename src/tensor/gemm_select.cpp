#include "tensor/gemm_select.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/log.h"
#include "util/random.h"

// Note [GEMM choice by measurement]
// Which library is fastest depends on the CPU (Zen 4 ran AVX-512 at half rate, Zen 5 and Sapphire
// Rapids at full rate, the latter with AMX), on the libraries' versions and on environment
// variables a user may set (OPENBLAS_CORETYPE=Haswell halves OpenBLAS's f32 rate on AVX-512 CPUs;
// ONEDNN_MAX_CPU_ISA caps oneDNN). So nothing is assumed: every candidate library is timed on each
// shape class, and the fastest serves that class. The answer is cached per machine key, since a
// choice that changed from run to run would change the bits a run gives; a key that differs in
// any part (another CPU, library, thread count or variable) is measured anew. The variables are
// read, never written, except that OpenBLAS is asked for its AVX-512 kernels when the user set
// none (gemm.cpp), and what it then runs is measured like anything else.

namespace zt {

namespace {

using json = nlohmann::json;

constexpr int kCacheSchema = 2;  // 2: bf16 also measured widened to f32
constexpr const char* kTransNames[kGemmTransCount] = {"NN", "NT", "TN", "TT"};
constexpr const char* kSizeNames[kGemmSizeCount] = {"small", "large"};

int dtype_slot(DType t) { return t == DType::kBF16 ? 1 : 0; }

// An exclusive flock on PATH.lock for the life of the object; not held when the file cannot be
// made (a read-only cache directory), which the caller learns through held().
class FileLock {
public:
    explicit FileLock(const std::string& path) {
        fd_ = ::open((path + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
        if (fd_ < 0) return;
        while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
        }
    }
    ~FileLock() {
        if (fd_ >= 0) ::close(fd_);  // closing releases the lock
    }
    FileLock(const FileLock&) = delete;
    FileLock& operator=(const FileLock&) = delete;
    bool held() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};

// mkdir -p; false when some part cannot be made.
bool make_dirs(const std::string& dir) {
    for (size_t pos = 1; pos <= dir.size(); ++pos) {
        if (pos < dir.size() && dir[pos] != '/') continue;
        const std::string part = dir.substr(0, pos);
        if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
    return true;
}

json choice_to_json(const GemmChoice& c) {
    json classes = json::array();
    for (int d = 0; d < 2; ++d)
        for (int t = 0; t < kGemmTransCount; ++t)
            for (int s = 0; s < kGemmSizeCount; ++s) {
                const GemmClassChoice& cc = c.classes[d][t][s];
                json rates = json::object();
                for (const auto& [lib, r] : cc.rates) rates[gemm_library_name(lib)] = r;
                classes.push_back({{"dtype", d == 0 ? "f32" : "bf16"},
                                   {"trans", kTransNames[t]},
                                   {"size", kSizeNames[s]},
                                   {"library", gemm_library_name(cc.lib)},
                                   {"flops", rates}});
            }
    return {{"schema", kCacheSchema}, {"key", c.key}, {"classes", classes}};
}

int index_of(const char* const* names, int count, const std::string& name) {
    for (int i = 0; i < count; ++i)
        if (name == names[i]) return i;
    ZT_CHECK(false, "unknown name ", name);
    return 0;
}

// The cached choice, or false when the file is absent, damaged, of another schema or another key.
bool choice_from_json(const std::string& path, const std::string& key, GemmChoice& out) {
    std::ifstream f(path);
    if (!f) return false;
    try {
        json j = json::parse(f);
        if (j.at("schema").get<int>() != kCacheSchema || j.at("key").get<std::string>() != key)
            return false;
        GemmChoice c;
        c.key = key;
        int seen = 0;
        for (const json& e : j.at("classes")) {
            const int d = e.at("dtype").get<std::string>() == "bf16" ? 1 : 0;
            const int t = index_of(kTransNames, kGemmTransCount, e.at("trans").get<std::string>());
            const int s = index_of(kSizeNames, kGemmSizeCount, e.at("size").get<std::string>());
            GemmClassChoice& cc = c.classes[d][t][s];
            cc.lib = parse_gemm_library(e.at("library").get<std::string>(), path);
            for (const auto& [name, r] : e.at("flops").items())
                cc.rates.emplace_back(parse_gemm_library(name, path), r.get<double>());
            ++seen;
        }
        if (seen != 2 * kGemmTransCount * kGemmSizeCount) return false;
        out = std::move(c);
        return true;
    } catch (const std::exception& e) {
        log_warn("gemm: ignoring the damaged choice cache ", path, " (", e.what(),
                 "); measuring again");
        return false;
    }
}

GemmChoice measure_all(const std::string& key, const GemmMeasureFn& measure) {
    GemmChoice c;
    c.key = key;
    for (DType dt : {DType::kF32, DType::kBF16})
        for (int t = 0; t < kGemmTransCount; ++t)
            for (int s = 0; s < kGemmSizeCount; ++s) {
                const GemmClass cls{dt, static_cast<GemmTrans>(t), static_cast<GemmSize>(s)};
                GemmClassChoice& cc = c.classes[dtype_slot(dt)][t][s];
                double best = 0;
                for (GemmLibrary lib : gemm_candidates(dt)) {
                    const double r = measure(lib, cls);  // 0: cannot run here
                    cc.rates.emplace_back(lib, r);
                    if (r > best) {  // strictly faster: ties keep the earlier candidate
                        best = r;
                        cc.lib = lib;
                    }
                }
                ZT_CHECK(best > 0, "gemm: no library can compute ", gemm_class_name(cls),
                         " products on this machine");
            }
    return c;
}

// Writes through a temporary file and a rename, so a reader never sees half a file.
bool write_cache(const std::string& path, const GemmChoice& c, std::string& why) {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
        std::ofstream f(tmp, std::ios::trunc);
        f << choice_to_json(c).dump(1) << "\n";
        f.flush();
        if (!f) {
            why = str_cat("cannot write ", tmp);
            std::remove(tmp.c_str());
            return false;
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        why = str_cat("cannot rename ", tmp, ": ", std::strerror(errno));
        std::remove(tmp.c_str());
        return false;
    }
    return true;
}

// dtype slot 0 (f32) or 1 (bf16) served by `name` in every class, when it is not empty.
void apply_override(GemmChoice& c, int slot, const std::string& name, const char* variable) {
    if (name.empty()) return;
    GemmLibrary lib = parse_gemm_library(name, variable);
    if (slot == 0 && lib == GemmLibrary::kOneDnnF32) lib = GemmLibrary::kOneDnn;  // the same
    for (auto& by_trans : c.classes[slot])
        for (GemmClassChoice& cc : by_trans) {
            for (const auto& [measured, rate] : cc.rates)
                ZT_CHECK(measured != lib || rate > 0, variable, "=", name, ": ",
                         gemm_library_name(lib), " cannot compute ", slot == 0 ? "f32" : "bf16",
                         " products on this machine (measured as unsupported); unset ", variable,
                         " or name another library");
            cc.lib = lib;
        }
}

}  // namespace

GemmClass gemm_class_of(DType ab_dtype, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
    const DType d = ab_dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
    return {d, static_cast<GemmTrans>((ta ? 2 : 0) + (tb ? 1 : 0)),
            flops < kGemmSmallFlops ? GemmSize::kSmall : GemmSize::kLarge};
}

std::string gemm_class_name(const GemmClass& c) {
    return str_cat(dtype_name(c.dtype == DType::kBF16 ? DType::kBF16 : DType::kF32), " ",
                   kTransNames[static_cast<int>(c.trans)], " ",
                   kSizeNames[static_cast<int>(c.size)]);
}

std::vector<GemmLibrary> gemm_candidates(DType ab_dtype) {
    // bf16: oneDNN's native product, or the operands widened to f32 for oneDNN's or OpenBLAS's f32
    // product (Note [Widened GEMM] in gemm.cpp); which wins depends on the CPU's bf16 rate.
    if (ab_dtype == DType::kBF16)
        return {GemmLibrary::kOneDnn, GemmLibrary::kOneDnnF32, GemmLibrary::kOpenBlas};
    return {GemmLibrary::kOneDnn, GemmLibrary::kOpenBlas};
}

GemmLibrary parse_gemm_library(const std::string& name, const std::string& what) {
    if (name == "onednn") return GemmLibrary::kOneDnn;
    if (name == "openblas") return GemmLibrary::kOpenBlas;
    if (name == "onednn-f32") return GemmLibrary::kOneDnnF32;
    ZT_CHECK(false, what, ": expected \"onednn\", \"onednn-f32\" or \"openblas\", got \"", name,
             "\"");
    return GemmLibrary::kOneDnn;
}

const GemmClassChoice& GemmChoice::at(const GemmClass& c) const {
    return classes[dtype_slot(c.dtype)][static_cast<int>(c.trans)][static_cast<int>(c.size)];
}

GemmLibrary GemmChoice::library_for(const GemmClass& c) const { return at(c).lib; }

double GemmChoice::ceiling_flops(DType ab_dtype) const {
    double best = 0;
    for (const auto& by_trans : classes[dtype_slot(ab_dtype)]) {
        const GemmClassChoice& cc = by_trans[static_cast<int>(GemmSize::kLarge)];
        for (const auto& [lib, r] : cc.rates)
            if (lib == cc.lib && r > best) best = r;
    }
    return best;
}

std::string GemmChoice::summary() const {
    std::ostringstream s;
    for (int d = 0; d < 2; ++d) {
        // The library of the large classes the engine uses (NN, NT, TN), then what differs.
        const GemmLibrary main_lib = classes[d][1][1].lib;
        s << (d == 0 ? "f32 " : ", bf16 ") << gemm_library_name(main_lib);
        std::string other;
        for (int t = 0; t < 3; ++t)
            for (int z = 0; z < kGemmSizeCount; ++z)
                if (classes[d][t][z].lib != main_lib)
                    other += str_cat(other.empty() ? "" : " ", kTransNames[t], "-", kSizeNames[z],
                                     " ", gemm_library_name(classes[d][t][z].lib));
        if (!other.empty()) s << " (" << other << ")";
        if (d == 0 && !f32_override.empty()) s << " [ZT_GEMM_F32]";
        if (d == 1 && !bf16_override.empty()) s << " [ZT_GEMM_BF16]";
    }
    s << "; " << source;
    return s.str();
}

std::string gemm_cache_path(const std::string& cache_dir, const std::string& key) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(hash_string(key)));
    return cache_dir + "/gemm-" + hex + ".json";
}

GemmChoice select_gemm(const GemmSelectOptions& options, const GemmMeasureFn& measure) {
    GemmChoice c;
    if (options.cache_dir.empty()) {
        c = measure_all(options.key, measure);
        c.source = "measured";
    } else if (!make_dirs(options.cache_dir)) {
        c = measure_all(options.key, measure);
        c.source = str_cat("measured (cannot make ", options.cache_dir, ")");
    } else {
        const std::string path = gemm_cache_path(options.cache_dir, options.key);
        FileLock lock(path);  // Note [GEMM choice by measurement]: one measurer per host
        if (choice_from_json(path, options.key, c)) {
            c.source = "cache " + path;
        } else {
            c = measure_all(options.key, measure);
            std::string why;
            c.source = write_cache(path, c, why) ? "measured, cached in " + path
                                                 : "measured (not cached: " + why + ")";
        }
    }
    c.f32_override = options.f32_override;
    c.bf16_override = options.bf16_override;
    apply_override(c, 0, options.f32_override, "ZT_GEMM_F32");
    apply_override(c, 1, options.bf16_override, "ZT_GEMM_BF16");
    return c;
}

}  // namespace zt
