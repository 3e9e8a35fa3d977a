// Helpers for the click-data tests: a temporary directory and a small random click file.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/click/click_dataset.h"
#include "data/click/ctr_file.h"
#include "util/error.h"
#include "util/random.h"

namespace zt::click_test {

namespace fs = std::filesystem;

class TempDir {
  public:
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "zt_click_test_XXXXXX").string();
        ZT_ASSERT(::mkdtemp(tmpl.data()) != nullptr);
        path_ = tmpl;
    }
    ~TempDir() { fs::remove_all(path_); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    const fs::path& path() const { return path_; }

  private:
    fs::path path_;
};

// What a writer was given, record by record, for comparing with what a reader returns.
struct Records {
    int F = 0;
    std::vector<int64_t> rows;
    std::vector<float> labels;
    std::vector<std::vector<float>> dense;                 // [record][F]
    std::vector<std::vector<std::vector<int64_t>>> ids;    // [record][table][j]
    std::vector<std::vector<std::vector<float>>> weights;  // [record][table][j], when weighted
};

// n records over tables `rows` (0: raw 64-bit ids), bag sizes 0..max_bag (varying), dense values
// i + f / 8.
inline Records make_records(int64_t n, int F, std::vector<int64_t> rows, int max_bag, bool weighted,
                            uint64_t seed = 1) {
    Records r;
    r.F = F;
    r.rows = rows;
    Rng rng(seed);
    for (int64_t i = 0; i < n; ++i) {
        r.labels.push_back(static_cast<float>(rng.below(2)));
        std::vector<float> d;
        for (int f = 0; f < F; ++f) d.push_back(static_cast<float>(i) + f / 8.0f);
        r.dense.push_back(d);
        std::vector<std::vector<int64_t>> bags;
        std::vector<std::vector<float>> ws;
        for (size_t k = 0; k < rows.size(); ++k) {
            const int len = static_cast<int>(rng.below(max_bag + 1));
            std::vector<int64_t> bag;
            std::vector<float> w;
            for (int j = 0; j < len; ++j) {
                // rows 0: a table of raw 64-bit ids, any value (Note [ZTCLICK layout])
                bag.push_back(static_cast<int64_t>(rows[k] == 0 ? rng.next() : rng.below(rows[k])));
                w.push_back(static_cast<float>(rng.uniform()));
            }
            bags.push_back(bag);
            ws.push_back(w);
        }
        r.ids.push_back(bags);
        if (weighted) r.weights.push_back(ws);
    }
    return r;
}

inline void write_records(const std::string& path, const Records& r) {
    const bool weighted = !r.weights.empty();
    CtrFileWriter w(path, r.F, r.rows, weighted);
    for (size_t i = 0; i < r.labels.size(); ++i) {
        std::vector<std::span<const int64_t>> bags(r.ids[i].begin(), r.ids[i].end());
        std::vector<std::span<const float>> ws;
        if (weighted) ws.assign(r.weights[i].begin(), r.weights[i].end());
        w.add(r.labels[i], r.dense[i], bags, ws);
    }
    w.finish();
}

// n valid Criteo TSV lines (label, 13 integers, 26 hex categoricals, some empty), each ending
// in a newline, drawn from `seed`.
inline std::string random_criteo_lines(int n, uint64_t seed) {
    Rng rng(seed);
    std::string out;
    static const char* hex = "0123456789abcdef";
    for (int i = 0; i < n; ++i) {
        out += rng.uniform() < 0.3 ? "1" : "0";
        for (int j = 0; j < 13; ++j) {
            out += '\t';
            if (rng.uniform() < 0.9) out += std::to_string(static_cast<int>(rng.uniform() * 50));
        }
        for (int k = 0; k < 26; ++k) {
            out += '\t';
            if (rng.uniform() < 0.05) continue;
            const int digits = 1 + static_cast<int>(rng.uniform() * 3);
            for (int d = 0; d < digits; ++d) out += hex[static_cast<int>(rng.uniform() * 16) & 15];
        }
        out += '\n';
    }
    return out;
}

// The same records in the same order (labels, dense values, every table's bags).
inline void expect_same_records(const ClickBatchBuffers& a, const ClickBatchBuffers& b) {
    EXPECT_EQ(a.B, b.B);
    EXPECT_EQ(a.labels, b.labels);
    EXPECT_EQ(a.dense, b.dense);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(a.offsets, b.offsets);
}

}  // namespace zt::click_test
