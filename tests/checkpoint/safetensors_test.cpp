// Safetensors reader/writer and GPT weight import/export: round trips, interchange with the
// Python safetensors library (skipped when no python3 has it), hostile files (each an
// error naming file and tensor, never a crash; run under ASan in the sanitizer build), and the
// nanoGPT / Hugging Face GPT-2 layouts.
#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <sstream>

#include "models/gpt/gpt_weights.h"
#include "tensor/dtype.h"
#include "util/error.h"
#include "reader_required.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

class TempDir {
  public:
    TempDir() {
        static int counter = 0;
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = fs::temp_directory_path() /
                str_cat("zt_st_", ::getpid(), "_", counter++, "_", info ? info->name() : "x");
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    const fs::path& path() const { return path_; }

  private:
    fs::path path_;
};

std::vector<std::byte> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(chars.size());
    if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
    return out;
}

void write_bytes(const std::string& path, std::span<const std::byte> bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
}

// The message of the zt::Error `fn` throws; "" when it does not throw.
std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// A file from a header string and `data_bytes` data bytes (value i & 0xff); the length field is
// the header's size unless `length` says otherwise.
std::vector<std::byte> raw_file(std::string_view header, size_t data_bytes,
                                std::optional<uint64_t> length = std::nullopt) {
    const uint64_t n = length.value_or(header.size());
    std::vector<std::byte> out(8 + header.size() + data_bytes);
    for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(n >> (8 * i));
    std::memcpy(out.data() + 8, header.data(), header.size());
    for (size_t i = 0; i < data_bytes; ++i) out[8 + header.size() + i] = static_cast<std::byte>(i);
    return out;
}

template <typename T>
std::vector<T> iota_values(size_t n, float scale, float offset) {
    std::vector<T> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = from_f32<T>(static_cast<float>(i) * scale + offset);
    return v;
}

// ---- Python interop helpers ----

// The interpreter that has both safetensors and torch: the python3 on PATH, else Debian's
// /usr/bin/python3 (python3-torch, and safetensors installed by scripts/setup.sh); empty if neither.
const std::string& python_with_safetensors() {
    static const std::string chosen = [] {
        for (const char* py : {"python3", "/usr/bin/python3"}) {
            const std::string probe =
                str_cat(py, " -c 'import safetensors.torch, torch' >/dev/null 2>&1");
            if (std::system(probe.c_str()) == 0) return std::string(py);
        }
        return std::string();
    }();
    return chosen;
}

bool have_python_safetensors() { return !python_with_safetensors().empty(); }

#define ZT_REQUIRE_PYTHON()                                                      \
    do {                                                                         \
        if (!have_python_safetensors())                                          \
            ZT_READER_MISSING("neither python3 nor /usr/bin/python3 has safetensors "    \
                          "and torch (scripts/setup.sh installs them)");           \
    } while (0)

// Runs `script` with python3 and the directory as argv[1]; returns its exit status and prints
// its output on failure.
int run_python(const TempDir& dir, const std::string& script) {
    const std::string py = dir.file("script.py"), log = dir.file("python.log");
    std::ofstream(py) << script;
    const int rc =
        std::system(str_cat(python_with_safetensors(), " ", py, " ", dir.path().string(), " >", log, " 2>&1").c_str());
    if (rc != 0) {
        std::ifstream in(log);
        std::stringstream ss;
        ss << in.rdbuf();
        ADD_FAILURE() << "python exited with " << rc << ":\n" << ss.str();
    }
    return rc;
}

// The tensors both sides write in the interop tests, defined by formula.
struct Sample {
    std::vector<float> a = iota_values<float>(105, 0.25f, -7.0f);  // F32 [3, 5, 7]
    std::vector<bf16> b = iota_values<bf16>(13, 0.5f, -3.0f);      // BF16 [13]
    std::vector<f16> c = iota_values<f16>(6, 0.125f, 0.0f);        // F16 [2, 3]
    std::vector<int64_t> ids = {0, 1000000007, 2000000014};        // I64 [3]
    std::vector<uint8_t> u = {0, 37, 74, 111, 148, 185, 222};      // U8 [7], i * 37
    float scalar = 42.0f;                                          // F32 []

    void add_to(SafetensorsWriter& w) const {
        w.add("a", "F32", {3, 5, 7}, a.data(), a.size() * 4);
        w.add("b", "BF16", {13}, b.data(), b.size() * 2);
        w.add("c", "F16", {2, 3}, c.data(), c.size() * 2);
        w.add("empty", "F32", {0, 4}, nullptr, 0);
        w.add("ids", "I64", {3}, ids.data(), ids.size() * 8);
        w.add("u", "U8", {7}, u.data(), u.size());
        w.add("scalar", "F32", {}, &scalar, 4);
    }
};

constexpr const char* kPySample = R"(
import torch
def sample():
    return {
        "a": (torch.arange(105, dtype=torch.float32) * 0.25 - 7).reshape(3, 5, 7),
        "b": (torch.arange(13, dtype=torch.float32) * 0.5 - 3).to(torch.bfloat16),
        "c": (torch.arange(6, dtype=torch.float32) * 0.125).reshape(2, 3).to(torch.float16),
        "empty": torch.zeros(0, 4),
        "ids": torch.arange(3, dtype=torch.int64) * 1000000007,
        "u": (torch.arange(7, dtype=torch.int64) * 37).to(torch.uint8),
        "scalar": torch.tensor(42.0),
    }
)";

void expect_sample(const SafetensorsFile& f) {
    const Sample s;
    ASSERT_EQ(f.tensors().size(), 7u);
    std::vector<std::string> names;
    for (const auto& t : f.tensors()) names.push_back(t.name);
    EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c", "empty", "ids", "scalar", "u"}));
    EXPECT_EQ(f.tensor("a").dtype, "F32");
    EXPECT_EQ(f.tensor("a").shape, (std::vector<int64_t>{3, 5, 7}));
    EXPECT_EQ(f.tensor("b").dtype, "BF16");
    EXPECT_EQ(f.tensor("c").shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(f.tensor("empty").shape, (std::vector<int64_t>{0, 4}));
    EXPECT_EQ(f.tensor("empty").numel, 0);
    EXPECT_EQ(f.tensor("scalar").shape, std::vector<int64_t>{});
    EXPECT_EQ(f.tensor("scalar").numel, 1);

    std::vector<float> out(105);
    f.read_f32("a", out.data(), 105);
    for (size_t i = 0; i < 105; ++i) EXPECT_EQ(out[i], static_cast<float>(i) * 0.25f - 7.0f) << i;
    f.read_f32("b", out.data(), 13);
    for (size_t i = 0; i < 13; ++i) EXPECT_EQ(out[i], static_cast<float>(i) * 0.5f - 3.0f) << i;
    f.read_f32("c", out.data(), 6);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(out[i], static_cast<float>(i) * 0.125f) << i;
    f.read_f32("empty", out.data(), 0);
    f.read_f32("scalar", out.data(), 1);
    EXPECT_EQ(out[0], 42.0f);
    auto ids = f.data("ids");
    ASSERT_EQ(ids.size(), 24u);
    for (size_t i = 0; i < 3; ++i) {
        int64_t v;
        std::memcpy(&v, ids.data() + 8 * i, 8);
        EXPECT_EQ(v, s.ids[i]);
    }
    auto u = f.data("u");
    ASSERT_EQ(u.size(), 7u);
    for (size_t i = 0; i < 7; ++i) EXPECT_EQ(static_cast<int>(u[i]), static_cast<int>(i * 37));
}

// ---- round trip ----

TEST(Safetensors, RoundTripMixedDtypesOddShapesZeroSizeMetadata) {
    TempDir dir;
    const Sample s;
    SafetensorsWriter w;
    s.add_to(w);
    w.add_metadata("format", "pt");
    w.add_metadata("note", "two words");
    const std::string path = dir.file("rt.safetensors");
    w.write(path);
    EXPECT_FALSE(fs::exists(path + ".tmp"));

    const auto bytes = read_bytes(path);
    EXPECT_EQ(bytes, w.serialize());
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<uint64_t>(bytes[i]);
    EXPECT_EQ(n % 8, 0u) << "header padded to 8 bytes";

    const SafetensorsFile f(path);
    expect_sample(f);
    EXPECT_EQ(f.metadata(),
              (std::map<std::string, std::string>{{"format", "pt"}, {"note", "two words"}}));
    for (const auto& t : f.tensors()) {
        auto d = f.data(t.name);
        EXPECT_EQ(d.size(), t.nbytes());
        EXPECT_EQ(reinterpret_cast<uintptr_t>(d.data()) % safetensors_dtype_size(t.dtype), 0u)
            << t.name << " is not aligned to its element size";
    }
    // The same bytes parsed from memory.
    const SafetensorsFile m(std::span<const std::byte>(bytes), "in-memory");
    expect_sample(m);
}

// A tensor added as a source (bytes on demand) writes the same file as one added as data; the
// source is asked for its bytes once, in order, in whole elements.
TEST(Safetensors, SourceTensorWritesTheSameBytesAsData) {
    TempDir dir;
    std::vector<float> big(1000);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.25f - 7.0f;
    const std::vector<uint16_t> small = {1, 2, 3};
    SafetensorsWriter a, b;
    a.add("emb", "F32", {250, 4}, big.data(), big.size() * 4);
    a.add("w", "BF16", {3}, small.data(), 6);
    std::vector<std::pair<uint64_t, size_t>> asked;
    b.add_source("emb", "F32", {250, 4}, big.size() * 4,
                 [&](uint64_t offset, void* dst, size_t n) {
                     asked.emplace_back(offset, n);
                     std::memcpy(dst, reinterpret_cast<const std::byte*>(big.data()) + offset, n);
                 });
    b.add("w", "BF16", {3}, small.data(), 6);
    a.write(dir.file("a.safetensors"));
    b.write(dir.file("b.safetensors"));
    EXPECT_EQ(read_bytes(dir.file("a.safetensors")), read_bytes(dir.file("b.safetensors")));
    ASSERT_EQ(asked.size(), 1u);  // 4,000 bytes: one piece
    EXPECT_EQ(asked[0], (std::pair<uint64_t, size_t>{0, 4000}));
    EXPECT_EQ(b.serialize(), read_bytes(dir.file("a.safetensors")));
    SafetensorsWriter c;
    EXPECT_THROW(c.add_source("x", "F32", {3}, 8, [](uint64_t, void*, size_t) {}), Error);
}

TEST(Safetensors, RoundTripEmptyFileAndOverwrite) {
    TempDir dir;
    const std::string path = dir.file("e.safetensors");
    SafetensorsWriter().write(path);
    EXPECT_EQ(read_bytes(path), raw_file("{}      ", 0));  // as the reference writes it
    EXPECT_TRUE(SafetensorsFile(path).tensors().empty());

    const std::vector<float> x = {1.5f, -2.0f};
    SafetensorsWriter w;
    w.add("x", "F32", {2}, x.data(), 8);
    w.write(path);  // replaces the file
    const SafetensorsFile f(path);
    ASSERT_EQ(f.tensors().size(), 1u);
    std::vector<float> got(2);
    f.read_f32("x", got.data(), 2);
    EXPECT_EQ(got, x);
}

TEST(Safetensors, ReadF32Errors) {
    TempDir dir;
    const Sample s;
    SafetensorsWriter w;
    s.add_to(w);
    w.write(dir.file("s.safetensors"));
    const SafetensorsFile f(dir.file("s.safetensors"));
    std::vector<float> out(200);
    EXPECT_NE(error_of([&] { f.read_f32("a", out.data(), 104); }).find("105 elements"),
              std::string::npos);
    EXPECT_NE(error_of([&] { f.read_f32("ids", out.data(), 3); }).find("dtype I64"),
              std::string::npos);
    const std::string e = error_of([&] { f.read_f32("nope", out.data(), 1); });
    EXPECT_NE(e.find("'nope'"), std::string::npos) << e;
    EXPECT_NE(e.find("s.safetensors"), std::string::npos) << e;
    EXPECT_EQ(f.find("nope"), nullptr);
}

TEST(Safetensors, WriterRejectsBadInput) {
    const float x[6] = {};
    auto add = [&](std::string name, std::string dtype, std::vector<int64_t> shape, size_t bytes) {
        return error_of([&] {
            SafetensorsWriter w;
            w.add("x", "F32", {6}, x, 24);
            w.add(name, dtype, shape, x, bytes);
        });
    };
    EXPECT_NE(add("x", "F32", {6}, 24).find("added twice"), std::string::npos);
    EXPECT_NE(add("y", "F32", {2, 3}, 20).find("need 24 bytes"), std::string::npos);
    EXPECT_NE(add("y", "F33", {6}, 24).find("unknown dtype"), std::string::npos);
    EXPECT_NE(add("y", "F32", {-6}, 24).find("negative"), std::string::npos);
    EXPECT_NE(add("y", "F32", {int64_t{1} << 62, 8}, 24).find("need more than"), std::string::npos);
    EXPECT_NE(add("__metadata__", "F32", {6}, 24).find("__metadata__"), std::string::npos);
    EXPECT_EQ(add("y", "F32", {2, 3}, 24), "");
}

// Files from writers that do not align (old safetensors versions, hand-made files): half
// precision data at an odd address must convert without a misaligned typed access (UBSan).
TEST(Safetensors, ReadsMisalignedData) {
    const std::string header =
        R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
        R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[3,7]},)"
        R"("c":{"dtype":"F32","shape":[2],"data_offsets":[7,15]}})"
        "       ";  // 8-byte aligned header: the buffer starts aligned, "b" at an odd address
    ASSERT_EQ(header.size() % 8, 0u);
    auto bytes = raw_file(header, 15);
    const float c[2] = {3.25f, -1.0f};
    const bf16 b[2] = {f32_to_bf16(0.5f), f32_to_bf16(-7.0f)};
    std::memcpy(bytes.data() + 8 + header.size() + 3, b, 4);
    std::memcpy(bytes.data() + 8 + header.size() + 7, c, 8);
    const SafetensorsFile f(std::span<const std::byte>(bytes), "misaligned");
    float out[2];
    f.read_f32("b", out, 2);
    EXPECT_EQ(out[0], 0.5f);
    EXPECT_EQ(out[1], -7.0f);
    f.read_f32("c", out, 2);
    EXPECT_EQ(out[0], 3.25f);
    EXPECT_EQ(out[1], -1.0f);
}

// ---- hostile files ----

struct HostileCase {
    const char* what;
    std::vector<std::byte> bytes;
    std::vector<std::string> expect;  // substrings of the error message
};

std::string tensor_json(const std::string& name, const std::string& dtype, const std::string& shape,
                        const std::string& offsets) {
    return str_cat("\"", name, "\":{\"dtype\":\"", dtype, "\",\"shape\":", shape,
                   ",\"data_offsets\":", offsets, "}");
}

std::vector<HostileCase> hostile_cases() {
    auto one = [](const std::string& entry) { return "{" + entry + "}"; };
    const std::string good_a = tensor_json("a", "F32", "[2]", "[0,8]");
    std::vector<HostileCase> c;
    c.push_back({"empty file", {}, {"shorter than the 8-byte"}});
    c.push_back({"short file", std::vector<std::byte>(5), {"shorter than the 8-byte"}});
    c.push_back({"header length past the end", raw_file("{}", 0, 1000), {"header length 1000"}});
    c.push_back({"header length 2^64-1", raw_file("{}", 0, ~uint64_t{0}), {"exceeds the limit"}});
    c.push_back({"header length 0", raw_file("", 0), {"not valid JSON"}});
    c.push_back({"invalid JSON", raw_file(R"({"w": )", 0), {"not valid JSON"}});
    c.push_back({"invalid UTF-8", raw_file("{\"w\xff\":1}", 0), {"not valid JSON"}});
    c.push_back({"array header", raw_file("[1,2]", 0), {"must be a JSON object", "array"}});
    c.push_back({"string header", raw_file("\"x\"", 0), {"must be a JSON object"}});
    c.push_back({"number header", raw_file("42", 0), {"must be a JSON object"}});
    c.push_back({"entry not an object", raw_file(R"({"w_num":3})", 0), {"'w_num'", "object"}});
    c.push_back({"truncated data",
                 raw_file(one(tensor_json("w_trunc", "F32", "[4]", "[0,16]")), 12),
                 {"'w_trunc'", "past the end"}});
    c.push_back({"offsets past end",
                 raw_file(one(tensor_json("w_far", "U8", "[8]", "[992,1000]")), 16),
                 {"'w_far'", "past the end"}});
    c.push_back({"begin > end",
                 raw_file(one(tensor_json("w_rev", "F32", "[4]", "[16,0]")), 16),
                 {"'w_rev'", "begin > end"}});
    c.push_back({"size mismatch",
                 raw_file(one(tensor_json("w_size", "F32", "[2,3]", "[0,20]")), 20),
                 {"'w_size'", "need 24 bytes", "hold 20"}});
    c.push_back(
        {"shape product overflows",
         raw_file(one(tensor_json("w_ovf", "F32", "[4294967296,4294967296,2]", "[0,8]")), 8),
         {"'w_ovf'", "overflows"}});
    c.push_back({"bytes overflow",
                 raw_file(one(tensor_json("w_ovf4", "F32", "[4611686018427387904]", "[0,8]")), 8),
                 {"'w_ovf4'", "overflows"}});
    c.push_back({"dimension past int64",
                 raw_file(one(tensor_json("w_big", "U8", "[18446744073709551615]", "[0,8]")), 8),
                 {"'w_big'", "too large"}});
    c.push_back({"negative dimension",
                 raw_file(one(tensor_json("w_neg", "F32", "[-2]", "[0,8]")), 8),
                 {"'w_neg'", "non-negative"}});
    c.push_back({"fractional dimension",
                 raw_file(one(tensor_json("w_frac", "F32", "[1.5]", "[0,8]")), 8),
                 {"'w_frac'", "non-negative integer"}});
    c.push_back({"string shape",
                 raw_file(one(tensor_json("w_str", "F32", "\"2\"", "[0,8]")), 8),
                 {"'w_str'", "shape"}});
    c.push_back({"unknown dtype",
                 raw_file(one(tensor_json("w_dt", "F33", "[2]", "[0,8]")), 8),
                 {"'w_dt'", "unknown dtype \"F33\""}});
    c.push_back({"missing offsets",
                 raw_file(R"({"w_mo":{"dtype":"F32","shape":[2]}})", 8),
                 {"'w_mo'", "data_offsets"}});
    c.push_back({"three offsets",
                 raw_file(one(tensor_json("w_3", "F32", "[2]", "[0,8,8]")), 8),
                 {"'w_3'", "data_offsets"}});
    c.push_back({"negative offset",
                 raw_file(one(tensor_json("w_no", "F32", "[2]", "[-8,0]")), 8),
                 {"'w_no'", "data_offsets"}});
    c.push_back(
        {"overlap",
         raw_file("{" + good_a + "," + tensor_json("b_ov", "F32", "[2]", "[4,12]") + "}", 12),
         {"'a'", "'b_ov'", "overlap"}});
    c.push_back(
        {"gap",
         raw_file("{" + good_a + "," + tensor_json("b_gap", "F32", "[2]", "[12,20]") + "}", 20),
         {"'b_gap'", "belong to no tensor"}});
    c.push_back({"not starting at 0",
                 raw_file(one(tensor_json("w_off", "F32", "[2]", "[4,12]")), 12),
                 {"'w_off'", "belong to no tensor"}});
    c.push_back({"trailing bytes", raw_file(one(good_a), 12), {"4 trailing bytes"}});
    c.push_back({"duplicate key",
                 raw_file("{" + good_a + "," + good_a + "}", 8),
                 {"'a'", "appears twice"}});
    c.push_back({"deep nesting",
                 raw_file(std::string(100000, '[') + std::string(100000, ']'), 0),
                 {"nested deeper"}});
    c.push_back({"nested shape",
                 raw_file(one(tensor_json("w_nest", "F32", "[[[[2]]]]", "[0,8]")), 8),
                 {"nested deeper"}});
    c.push_back({"metadata value not a string",
                 raw_file(R"({"__metadata__":{"k_num":1}})", 0),
                 {"__metadata__", "'k_num'"}});
    c.push_back(
        {"metadata not an object", raw_file(R"({"__metadata__":[1]})", 0), {"__metadata__"}});
    return c;
}

TEST(SafetensorsHostile, EveryCaseIsAnErrorNamingFileAndTensor) {
    TempDir dir;
    int i = 0;
    for (const HostileCase& hc : hostile_cases()) {
        SCOPED_TRACE(hc.what);
        const std::string label = str_cat("hostile_", i++, ".safetensors");
        const std::string path = dir.file(label);
        write_bytes(path, hc.bytes);
        // Exact-size heap copy, so that ASan sees a read past the end.
        const std::vector<std::byte> exact(hc.bytes.begin(), hc.bytes.end());
        const std::string from_memory =
            error_of([&] { SafetensorsFile f(std::span<const std::byte>(exact), label); });
        const std::string from_file = error_of([&] { SafetensorsFile f(path); });
        for (const std::string* msg : {&from_memory, &from_file}) {
            ASSERT_FALSE(msg->empty()) << "accepted";
            EXPECT_NE(msg->find(label), std::string::npos) << *msg;
            for (const std::string& s : hc.expect)
                EXPECT_NE(msg->find(s), std::string::npos) << *msg;
        }
    }
}

// Random byte edits and truncations of a valid file: each parse is an error or a file whose
// every tensor can be read. Under ASan this is a small, deterministic fuzz run.
TEST(SafetensorsHostile, MutatedFilesNeverReadOutOfBounds) {
    const Sample s;
    SafetensorsWriter w;
    s.add_to(w);
    w.add_metadata("format", "pt");
    const std::vector<std::byte> good = w.serialize();
    auto exercise = [](const std::vector<std::byte>& bytes) {
        try {
            const SafetensorsFile f(std::span<const std::byte>(bytes), "mutant");
            std::vector<float> out;
            uint64_t sum = 0;
            for (const auto& t : f.tensors()) {
                for (std::byte b : f.data(t.name)) sum += static_cast<uint64_t>(b);
                if (t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16") {
                    out.resize(static_cast<size_t>(t.numel));
                    f.read_f32(t.name, out.data(), t.numel);
                }
            }
            return sum != ~uint64_t{0};
        } catch (const Error&) {
            return false;
        }
    };
    int accepted = 0;
    for (size_t len = 0; len < good.size(); ++len)
        accepted += exercise(std::vector<std::byte>(good.begin(), good.begin() + len));
    EXPECT_EQ(accepted, 0) << "a truncated file was accepted";
    std::mt19937 rng(1234);
    const char kChars[] = "0123456789[]{},:\"- ";
    accepted = 0;
    for (int iter = 0; iter < 3000; ++iter) {
        std::vector<std::byte> m = good;
        const int edits = 1 + static_cast<int>(rng() % 3);
        for (int e = 0; e < edits; ++e) {
            const size_t pos = rng() % std::min<size_t>(m.size(), 200);  // mostly the header
            m[pos] = static_cast<std::byte>(rng() % 2 ? kChars[rng() % (sizeof(kChars) - 1)]
                                                      : static_cast<char>(rng()));
        }
        accepted += exercise(m);
    }
    EXPECT_GT(accepted, 0) << "no mutant parsed; the mutations test nothing";
}

// ---- interchange with the Python safetensors library ----

TEST(SafetensorsPython, ReadsFileWrittenByPython) {
    ZT_REQUIRE_PYTHON();
    TempDir dir;
    ASSERT_EQ(run_python(dir, std::string(kPySample) + R"(
import sys
from safetensors.torch import save_file
save_file(sample(), sys.argv[1] + "/py.safetensors", metadata={"format": "pt", "who": "python"})
)"),
              0);
    const SafetensorsFile f(dir.file("py.safetensors"));
    expect_sample(f);
    EXPECT_EQ(f.metadata(),
              (std::map<std::string, std::string>{{"format", "pt"}, {"who", "python"}}));
}

TEST(SafetensorsPython, PythonReadsOurFile) {
    ZT_REQUIRE_PYTHON();
    TempDir dir;
    const Sample s;
    SafetensorsWriter w;
    s.add_to(w);
    w.add_metadata("producer", "zerotrain-test");
    w.add_metadata("format", "pt");
    w.write(dir.file("ours.safetensors"));
    ASSERT_EQ(run_python(dir, std::string(kPySample) + R"(
import sys
from safetensors import safe_open
with safe_open(sys.argv[1] + "/ours.safetensors", framework="pt") as f:
    assert f.metadata() == {"producer": "zerotrain-test", "format": "pt"}, f.metadata()
    want = sample()
    assert sorted(f.keys()) == sorted(want.keys()), list(f.keys())
    for k, v in want.items():
        got = f.get_tensor(k)
        assert got.dtype == v.dtype and got.shape == v.shape, (k, got.dtype, got.shape)
        assert torch.equal(got, v), (k, got, v)
)"),
              0);
}

// With one metadata key (the reference keeps metadata in a hash map, unordered beyond that),
// our bytes equal the reference implementation's: header text, key order, padding, data order.
TEST(SafetensorsPython, SerializationIsByteIdenticalToPython) {
    ZT_REQUIRE_PYTHON();
    TempDir dir;
    ASSERT_EQ(run_python(dir, std::string(kPySample) + R"(
import sys
from safetensors.torch import save_file
save_file(sample(), sys.argv[1] + "/py.safetensors", metadata={"format": "pt"})
)"),
              0);
    const Sample s;
    SafetensorsWriter w;
    s.add_to(w);
    w.add_metadata("format", "pt");
    EXPECT_EQ(w.serialize(), read_bytes(dir.file("py.safetensors")));
}

// ---- GPT weights ----

struct TinyGpt {
    static constexpr int64_t V = 11, T = 5, C = 8, L = 2;  // sizes that divide nothing
    std::vector<std::string> names;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<std::vector<float>> data;

    // Values by formula (salt > 0) or zeros (salt == 0).
    explicit TinyGpt(float salt) {
        auto add = [&](const std::string& n, std::vector<int64_t> shape) {
            names.push_back(n);
            int64_t numel = 1;
            for (int64_t d : shape) numel *= d;
            shapes.push_back(std::move(shape));
            std::vector<float> v(static_cast<size_t>(numel), 0.0f);
            const float k = static_cast<float>(names.size());
            if (salt != 0.0f)
                for (size_t i = 0; i < v.size(); ++i)
                    v[i] = std::sin(0.37f * static_cast<float>(i) + 1.3f * k * salt);
            data.push_back(std::move(v));
        };
        add("transformer.wte.weight", {V, C});
        add("transformer.wpe.weight", {T, C});
        for (int64_t l = 0; l < L; ++l) {
            const std::string h = str_cat("transformer.h.", l, ".");
            add(h + "ln_1.weight", {C});
            add(h + "ln_1.bias", {C});
            add(h + "attn.c_attn.weight", {3 * C, C});
            add(h + "attn.c_attn.bias", {3 * C});
            add(h + "attn.c_proj.weight", {C, C});
            add(h + "attn.c_proj.bias", {C});
            add(h + "ln_2.weight", {C});
            add(h + "ln_2.bias", {C});
            add(h + "mlp.c_fc.weight", {4 * C, C});
            add(h + "mlp.c_fc.bias", {4 * C});
            add(h + "mlp.c_proj.weight", {C, 4 * C});
            add(h + "mlp.c_proj.bias", {C});
        }
        add("transformer.ln_f.weight", {C});
        add("transformer.ln_f.bias", {C});
    }
    std::vector<NamedTensorF32> views() {
        std::vector<NamedTensorF32> v;
        for (size_t i = 0; i < names.size(); ++i)
            v.push_back({names[i], shapes[i], data[i].data()});
        return v;
    }
    size_t index(const std::string& name) const {
        return static_cast<size_t>(std::find(names.begin(), names.end(), name) - names.begin());
    }
};

bool is_conv1d(const std::string& name) {
    for (const char* s :
         {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
        if (name.ends_with(s)) return true;
    return false;
}

// An HF GPT-2 style file from `g`: Conv1D weights transposed to [in, out], names without the
// "transformer." prefix unless `prefixed`, plus the causal-mask buffers HF stores.
struct HfFile {
    std::vector<std::vector<float>> keep;  // transposed copies and buffers, alive until write
    SafetensorsWriter w;

    HfFile(const TinyGpt& g, bool prefixed) {
        keep.reserve(g.names.size() + 2 * TinyGpt::L);
        for (size_t i = 0; i < g.names.size(); ++i) {
            std::string name = prefixed ? g.names[i] : g.names[i].substr(12);
            std::vector<int64_t> shape = g.shapes[i];
            const float* p = g.data[i].data();
            if (is_conv1d(name)) {
                const int64_t out = shape[0], in = shape[1];
                auto& t = keep.emplace_back(g.data[i].size());
                for (int64_t o = 0; o < out; ++o)
                    for (int64_t k = 0; k < in; ++k) t[k * out + o] = g.data[i][o * in + k];
                shape = {in, out};
                p = t.data();
            }
            w.add(name, "F32", shape, p, g.data[i].size() * 4);
        }
        for (int64_t l = 0; l < TinyGpt::L; ++l) {
            const std::string h = str_cat(prefixed ? "transformer.h." : "h.", l, ".attn.");
            auto& mask = keep.emplace_back(TinyGpt::T * TinyGpt::T, 1.0f);
            w.add(h + "bias", "F32", {1, 1, TinyGpt::T, TinyGpt::T}, mask.data(), mask.size() * 4);
            auto& mb = keep.emplace_back(1, -1e4f);
            w.add(h + "masked_bias", "F32", {}, mb.data(), 4);
        }
    }
};

void expect_same(const TinyGpt& want, const TinyGpt& got) {
    for (size_t i = 0; i < want.names.size(); ++i)
        ASSERT_EQ(want.data[i], got.data[i]) << want.names[i];
}

TEST(GptWeights, NanoGptExportImportRoundTrip) {
    TempDir dir;
    TinyGpt src(1.0f), dst(0.0f);
    const auto src_views = src.views();
    export_gpt_weights(dir.file("g.safetensors"), src_views);
    const SafetensorsFile f(dir.file("g.safetensors"));
    EXPECT_EQ(detect_layout(f), WeightLayout::kNanoGpt);
    EXPECT_EQ(f.metadata(),
              (std::map<std::string, std::string>{{"format", "pt"}, {"producer", "zerotrain"}}));
    EXPECT_EQ(f.tensors().size(), src.names.size());
    EXPECT_FALSE(f.contains("lm_head.weight"));
    EXPECT_EQ(f.tensor("transformer.h.0.attn.c_attn.weight").shape,
              (std::vector<int64_t>{3 * TinyGpt::C, TinyGpt::C}));
    auto views = dst.views();
    import_gpt_weights(dir.file("g.safetensors"), views);
    expect_same(src, dst);
}

TEST(GptWeights, Bf16ExportRoundsToNearestEven) {
    TempDir dir;
    TinyGpt src(1.0f), dst(0.0f);
    export_gpt_weights(dir.file("g.safetensors"), src.views(), "BF16");
    EXPECT_EQ(SafetensorsFile(dir.file("g.safetensors")).tensor("transformer.wte.weight").dtype,
              "BF16");
    auto views = dst.views();
    import_gpt_weights(dir.file("g.safetensors"), views);
    for (size_t i = 0; i < src.names.size(); ++i)
        for (size_t j = 0; j < src.data[i].size(); ++j)
            ASSERT_EQ(dst.data[i][j], bf16_to_f32(f32_to_bf16(src.data[i][j]))) << src.names[i];
    EXPECT_NE(error_of([&] { export_gpt_weights(dir.file("x"), src.views(), "F64"); }), "");
}

TEST(GptWeights, HuggingFaceLayoutImportsLikeNanoGpt) {
    TempDir dir;
    TinyGpt src(1.0f);
    export_gpt_weights(dir.file("nano.safetensors"), src.views());
    for (bool prefixed : {false, true}) {
        SCOPED_TRACE(prefixed ? "prefixed (save_pretrained)" : "hub layout");
        HfFile hf(src, prefixed);
        hf.w.write(dir.file("hf.safetensors"));
        const SafetensorsFile f(dir.file("hf.safetensors"));
        EXPECT_EQ(detect_layout(f), WeightLayout::kHuggingFace);
        TinyGpt from_hf(0.0f), from_nano(0.0f);
        auto v1 = from_hf.views(), v2 = from_nano.views();
        import_gpt_weights(f, v1);
        import_gpt_weights(dir.file("nano.safetensors"), v2);
        expect_same(src, from_hf);
        expect_same(from_nano, from_hf);
    }
}

TEST(GptWeights, TiedHeadAcceptedOnlyWhenEqualToWte) {
    TempDir dir;
    TinyGpt src(1.0f);
    const size_t wte = src.index("transformer.wte.weight");
    for (bool equal : {true, false}) {
        HfFile hf(src, false);
        std::vector<float> head = src.data[wte];
        if (!equal) head[17] += 1.0f;
        hf.w.add("lm_head.weight", "F32", {TinyGpt::V, TinyGpt::C}, head.data(), head.size() * 4);
        hf.w.write(dir.file("h.safetensors"));
        TinyGpt dst(0.0f);
        auto views = dst.views();
        const std::string e =
            error_of([&] { import_gpt_weights(dir.file("h.safetensors"), views); });
        if (equal) {
            EXPECT_EQ(e, "");
            expect_same(src, dst);
        } else {
            EXPECT_NE(e.find("lm_head.weight differs"), std::string::npos) << e;
            EXPECT_NE(e.find("element 17"), std::string::npos) << e;
            EXPECT_EQ(dst.data[wte], std::vector<float>(src.data[wte].size(), 0.0f))
                << "params written before the error";
        }
    }
    EXPECT_NE(error_of([&] {
                  auto v = src.views();
                  v.push_back({"lm_head.weight", {TinyGpt::V, TinyGpt::C}, src.data[wte].data()});
                  export_gpt_weights(dir.file("x.safetensors"), v);
              }).find("tied head"),
              std::string::npos);
}

TEST(GptWeights, ShapeMismatchNamesTensorExpectedAndGot) {
    TempDir dir;
    // nanoGPT file whose h.1.mlp.c_fc.weight is [C, 4C] instead of [4C, C].
    TinyGpt src(1.0f);
    auto bad = src.views();
    const size_t k = src.index("transformer.h.1.mlp.c_fc.weight");
    bad[k].shape = {TinyGpt::C, 4 * TinyGpt::C};
    export_gpt_weights(dir.file("bad.safetensors"), bad);
    TinyGpt dst(0.0f);
    auto views = dst.views();
    std::string e = error_of([&] { import_gpt_weights(dir.file("bad.safetensors"), views); });
    EXPECT_NE(e.find("'transformer.h.1.mlp.c_fc.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("expected shape [32, 8], got [8, 32]"), std::string::npos) << e;

    // HF file whose h.0.mlp.c_fc.weight was left in nn.Linear layout.
    HfFile hf(src, false);
    SafetensorsWriter w;
    hf.w.write(dir.file("hf.safetensors"));
    const SafetensorsFile good(dir.file("hf.safetensors"));
    for (const auto& t : good.tensors()) {
        auto d = good.data(t.name);
        std::vector<int64_t> shape = t.shape;
        if (t.name == "h.0.mlp.c_fc.weight") shape = {shape[1], shape[0]};
        w.add(t.name, t.dtype, shape, d.data(), d.size());
    }
    w.write(dir.file("hf_bad.safetensors"));
    e = error_of([&] { import_gpt_weights(dir.file("hf_bad.safetensors"), views); });
    EXPECT_NE(e.find("'h.0.mlp.c_fc.weight'"), std::string::npos) << e;
    EXPECT_NE(e.find("expected shape [8, 32], got [32, 8]"), std::string::npos) << e;
    EXPECT_NE(e.find("Conv1D"), std::string::npos) << e;
    for (const auto& v : dst.data) EXPECT_EQ(v, std::vector<float>(v.size(), 0.0f));
}

TEST(GptWeights, MissingAndUnknownTensorsAreNamed) {
    TempDir dir;
    TinyGpt src(1.0f), dst(0.0f);
    auto partial = src.views();
    partial.erase(partial.begin() +
                  static_cast<std::ptrdiff_t>(src.index("transformer.h.1.ln_2.bias")));
    export_gpt_weights(dir.file("missing.safetensors"), partial);
    auto views = dst.views();
    std::string e = error_of([&] { import_gpt_weights(dir.file("missing.safetensors"), views); });
    EXPECT_NE(e.find("transformer.h.1.ln_2.bias"), std::string::npos) << e;
    EXPECT_NE(e.find("lacks 1 tensor"), std::string::npos) << e;

    auto extra = src.views();
    std::vector<float> junk(3, 1.0f);
    extra.push_back({"transformer.h.0.attn.rotary", {3}, junk.data()});
    export_gpt_weights(dir.file("extra.safetensors"), extra);
    e = error_of([&] { import_gpt_weights(dir.file("extra.safetensors"), views); });
    EXPECT_NE(e.find("transformer.h.0.attn.rotary"), std::string::npos) << e;
    EXPECT_NE(e.find("no parameter for"), std::string::npos) << e;
    for (const auto& v : dst.data) EXPECT_EQ(v, std::vector<float>(v.size(), 0.0f));
}

// Python reads our export as nanoGPT would, writes the Hugging Face GPT-2 layout from it with
// torch's own transpose, and our import of that file gives back the original weights.
TEST(GptWeightsPython, ExportReadByPythonAndHfLayoutFromPythonImports) {
    ZT_REQUIRE_PYTHON();
    TempDir dir;
    TinyGpt src(1.0f), dst(0.0f);
    export_gpt_weights(dir.file("nano.safetensors"), src.views());
    ASSERT_EQ(run_python(dir, R"(
import sys, torch
from safetensors import safe_open
from safetensors.torch import save_file
d = sys.argv[1]
with safe_open(d + "/nano.safetensors", framework="pt") as f:
    assert f.metadata() == {"format": "pt", "producer": "zerotrain"}, f.metadata()
    sd = {k: f.get_tensor(k) for k in f.keys()}
assert "lm_head.weight" not in sd and all(k.startswith("transformer.") for k in sd)
C = sd["transformer.wte.weight"].shape[1]
assert sd["transformer.h.0.attn.c_attn.weight"].shape == (3 * C, C)
conv1d = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
hf = {}
for k, v in sd.items():
    k = k[len("transformer."):]
    hf[k] = v.t().contiguous() if k.endswith(conv1d) else v
T = sd["transformer.wpe.weight"].shape[0]
for l in range(2):
    hf[f"h.{l}.attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
save_file(hf, d + "/hf.safetensors", metadata={"format": "pt"})
)"),
              0);
    const SafetensorsFile f(dir.file("hf.safetensors"));
    EXPECT_EQ(detect_layout(f), WeightLayout::kHuggingFace);
    auto views = dst.views();
    import_gpt_weights(f, views);
    expect_same(src, dst);
}

// A compacted model (docs/pruning.md) has an attention width A below C: with C = 9 A its
// nanoGPT c_attn (3A, C) alone looks like Hugging Face's (C, 3A) of a model of width C/3. Read
// beside attn.c_proj ((C, A) against (A, C)), the layout is never ambiguous.
TEST(GptWeights, CompactAttentionWidthKeepsTheLayout) {
    TempDir dir;
    constexpr int64_t A = 4, C = 36;
    std::vector<float> qkv(3 * A * C, 0.5f), proj(C * A, 0.25f);
    for (bool hf : {false, true}) {
        SafetensorsWriter w;
        const std::string pre = hf ? "h.0." : "transformer.h.0.";
        w.add(pre + "attn.c_attn.weight", "F32",
              hf ? std::vector<int64_t>{C, 3 * A} : std::vector<int64_t>{3 * A, C}, qkv.data(),
              qkv.size() * 4);
        w.add(pre + "attn.c_proj.weight", "F32",
              hf ? std::vector<int64_t>{A, C} : std::vector<int64_t>{C, A}, proj.data(),
              proj.size() * 4);
        w.write(dir.file("c.safetensors"));
        EXPECT_EQ(detect_layout(SafetensorsFile(dir.file("c.safetensors"))),
                  hf ? WeightLayout::kHuggingFace : WeightLayout::kNanoGpt);
    }
}

}  // namespace
}  // namespace zt
