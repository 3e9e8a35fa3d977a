// libFuzzer target for the checkpoint manifest reader and the shard reader behind it. Any input is
// either rejected with zt::Error or yields a Manifest that (1) writes back to JSON and parses again
// to the same JSON, (2) reads back from DIR/manifest.json the same, and, when small enough, (3) reads
// shards that a writer made for it: with the input's sizes and CRCs a mismatch is a zt::Error, with
// the written ones every range read (padding past numel included) returns exactly what was written.
// A fuzz finding is a crash, a sanitizer report or an abort() below (a broken property).
// Built and run by scripts/fuzz.sh (CI runs it from scripts/test.sh); by hand, from the repo root:
//
//   bash scripts/fuzz.sh                        # both targets, 45 s each, seeds from fuzz/make_seeds.py
//   ZT_FUZZ_SECONDS=600 bash scripts/fuzz.sh manifest
//
// A crash leaves build-fuzz/artifacts/manifest-crash-<sha1>; rerun it with
// build-fuzz/manifest_fuzz build-fuzz/artifacts/manifest-crash-<sha1>.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/shards.h"
#include "util/error.h"

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Shards are written only for small manifests: the point is the reader's arithmetic, not volume.
constexpr int64_t kMaxShardNumel = 4096;
constexpr size_t kMaxShardFiles = 16;
constexpr size_t kMaxTensors = 4;

void require(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "manifest_fuzz: property broken: %s\n", what);
        std::abort();
    }
}

// One scratch directory per process, on tmpfs where there is one (fsync is free there).
const std::string& scratch_dir() {
    static const std::string dir = [] {
        const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
        fs::path d = base / ("zt_manifest_fuzz_" + std::to_string(::getpid()));
        fs::create_directories(d);
        return d.string();
    }();
    return dir;
}

struct ScratchCleanup {
    std::string dir;  // a copy: scratch_dir()'s string may be destroyed first at exit
    ~ScratchCleanup() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

// What the writer puts at arena element i of tensor t: distinct per (t, i), exact in f32.
float value_at(size_t t, int64_t i) { return static_cast<float>(t * 100000 + i % 100000) + 0.5f; }

// Reading ranges derived from the input bytes, so a run is a function of its input.
struct Bytes {
    const uint8_t* p;
    size_t n;
    size_t k = 0;
    uint64_t next() {
        uint64_t x = 0;
        for (int i = 0; i < 8; ++i) x = (x << 8) | (n ? p[(k++) % n] : 0x5a);
        return x * 0x9e3779b97f4a7c15ull;
    }
};

void check_reads(const std::string& dir, const zt::Manifest& m, Bytes& rnd) {
    zt::ShardReader reader(dir, m);
    const int64_t span = m.numel + 8;  // past the end: a layout's padding, which reads as 0
    std::vector<float> out;
    for (int r = 0; r < 8; ++r) {
        const size_t t = rnd.next() % m.tensors.size();
        int64_t lo = static_cast<int64_t>(rnd.next() % static_cast<uint64_t>(span + 1));
        int64_t hi = static_cast<int64_t>(rnd.next() % static_cast<uint64_t>(span + 1));
        if (lo > hi) std::swap(lo, hi);
        out.assign(static_cast<size_t>(hi - lo) + 1, -1.0f);  // one guard element past hi
        reader.read(m.tensors[t], lo, hi, out.data());
        for (int64_t i = lo; i < hi; ++i)
            require(out[static_cast<size_t>(i - lo)] == (i < m.numel ? value_at(t, i) : 0.0f),
                    "ShardReader::read returned other values than were written");
        require(out.back() == -1.0f, "ShardReader::read wrote past hi");
    }
}

// Writes every file of the manifest under its own name, then reads the manifest's ranges back.
void exercise_shards(const zt::Manifest& parsed, Bytes& rnd) {
    if (parsed.numel > kMaxShardNumel || parsed.files.size() > kMaxShardFiles ||
        parsed.tensors.size() > kMaxTensors)
        return;
    // Written under staging/ and renamed into ckpt/, so that a file named like another file's
    // rank_R.safetensors is not overwritten by it.
    const std::string dir = scratch_dir() + "/ckpt", staging = scratch_dir() + "/staging";
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir);
    fs::create_directories(staging);
    zt::Manifest m = parsed;
    for (zt::CheckpointFile& f : m.files) {
        // File names are any plain name: rank_R.safetensors, "manifest.json", 255+ bytes, ...
        std::vector<std::vector<float>> data(m.tensors.size());
        std::vector<const float*> ptrs;
        for (size_t t = 0; t < m.tensors.size(); ++t) {
            for (int64_t i = f.lo; i < f.hi; ++i) data[t].push_back(value_at(t, i));
            ptrs.push_back(data[t].data());
        }
        const zt::CheckpointFile w = zt::write_shard(staging, f.rank, f.lo, f.hi, m.tensors, ptrs);
        fs::rename(fs::path(staging) / w.file, fs::path(dir) / f.file, ec);
        if (ec) return;  // a name the filesystem refuses (too long): nothing to read
        f.bytes = w.bytes;
        f.crc32c = w.crc32c;
    }
    // With the input's sizes and CRCs: a mismatch must be an error, never a wrong read.
    try {
        check_reads(dir, parsed, rnd);
    } catch (const zt::Error&) {
    }
    // With the written ones: every read succeeds and is exact.
    check_reads(dir, m, rnd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static ScratchCleanup cleanup{scratch_dir()};
    const json j = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return 0;
    zt::Manifest m;
    try {
        m = zt::parse_manifest(j, "fuzz");
    } catch (const zt::Error&) {
        return 0;  // rejected: the expected outcome for almost every mutation
    }
    // Every accessor, and the invariants parse_manifest promises.
    require(!m.tensors.empty() && m.tensors[0] == "master", "tensors[0] is not master");
    require(m.ranks >= 1 && int64_t{m.dp} * m.tp * m.pp == m.ranks, "layout does not multiply");
    require(m.updates >= 0 && m.updates <= m.step, "updates outside [0, step]");
    int64_t next = 0;
    for (const zt::CheckpointFile& f : m.files) {
        require(f.lo == next && f.hi >= f.lo && f.rank >= 0 && f.rank < m.ranks, "bad file range");
        require(!f.file.empty() && f.file.find('/') == std::string::npos, "file name with a path");
        next = f.hi;
    }
    require(next == m.numel, "files do not tile the arena");
    for (const zt::CheckpointParam& p : m.params) {
        int64_t n = 1;
        for (int64_t d : p.shape) n *= d;
        require(p.offset >= 0 && p.offset + n <= m.numel, "parameter outside the arena");
    }
    require(m.trainer.is_object(), "trainer is not an object");

    // Round trip: what manifest_to_json writes parses back to the same JSON.
    const json back = zt::manifest_to_json(m);
    zt::Manifest m2;
    try {
        m2 = zt::parse_manifest(back, "fuzz round trip");
    } catch (const zt::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        require(false, "manifest_to_json wrote a manifest parse_manifest rejects");
    }
    require(zt::manifest_to_json(m2) == back, "round trip changed the manifest");

    // The file path: write_manifest then read_manifest.
    const std::string dir = scratch_dir();
    zt::write_manifest(dir, m);
    require(zt::manifest_to_json(zt::read_manifest(dir)) == back, "read_manifest differs");

    Bytes rnd{data, size};
    try {
        exercise_shards(m, rnd);
    } catch (const zt::Error& e) {
        std::fprintf(stderr, "%s\n", e.what());
        require(false, "shards written for a valid manifest did not read back");
    }
    return 0;
}
