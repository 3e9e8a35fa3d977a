// GEMM selection with injected measurements: no verdict here depends on this machine's CPU, its
// libraries' speed or its environment.
#include "tensor/gemm_select.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "util/error.h"

namespace zt {

namespace {

struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/zt_gemm_select_XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
};

// A measurement that makes OpenBLAS faster on NN and oneDNN faster elsewhere for f32; for bf16,
// oneDNN's native product wins except on NN, where the operands widened for oneDNN's f32 product
// win (as on a CPU with a slow bf16 dot product). Counts calls.
struct FakeMeasure {
    int calls = 0;
    double operator()(GemmLibrary lib, const GemmClass& c) {
        ++calls;
        const bool nn = c.trans == GemmTrans::kNN;
        if (c.dtype == DType::kBF16) {
            if (lib == GemmLibrary::kOneDnn) return 900e9;
            if (lib == GemmLibrary::kOneDnnF32) return nn ? 950e9 : 240e9;
            return 200e9;
        }
        if (lib == GemmLibrary::kOpenBlas) return nn ? 300e9 : 100e9;
        return nn ? 200e9 : 250e9;
    }
};

GemmClass cls(DType d, GemmTrans t, GemmSize s = GemmSize::kLarge) { return {d, t, s}; }

}  // namespace

TEST(GemmSelect, PicksTheFasterPerClass) {
    FakeMeasure m;
    GemmChoice c = select_gemm({"k1", "", "", ""}, std::ref(m));
    EXPECT_EQ(c.library_for(cls(DType::kF32, GemmTrans::kNN)), GemmLibrary::kOpenBlas);
    EXPECT_EQ(c.library_for(cls(DType::kF32, GemmTrans::kNT)), GemmLibrary::kOneDnn);
    EXPECT_EQ(c.library_for(cls(DType::kF32, GemmTrans::kTN, GemmSize::kSmall)),
              GemmLibrary::kOneDnn);
    EXPECT_EQ(c.library_for(cls(DType::kBF16, GemmTrans::kNT)), GemmLibrary::kOneDnn);
    EXPECT_EQ(c.library_for(cls(DType::kBF16, GemmTrans::kNN)), GemmLibrary::kOneDnnF32);
    // f32: 4 transposes x 2 sizes x 2 candidates; bf16: 8 classes x 3 candidates (native, widened
    // for oneDNN, widened for OpenBLAS).
    EXPECT_EQ(m.calls, 4 * 2 * 2 + 4 * 2 * 3);
    // The ceiling is the best rate of a chosen library on a large class.
    EXPECT_DOUBLE_EQ(c.ceiling_flops(DType::kF32), 300e9);
    EXPECT_DOUBLE_EQ(c.ceiling_flops(DType::kBF16), 950e9);
    EXPECT_NE(c.summary().find("f32 onednn (NN-small openblas NN-large openblas)"),
              std::string::npos)
        << c.summary();
}

TEST(GemmSelect, OverrideDecidesF32Only) {
    FakeMeasure m;
    GemmChoice c = select_gemm({"k1", "", "openblas", ""}, std::ref(m));
    for (int t = 0; t < kGemmTransCount; ++t)
        EXPECT_EQ(c.library_for(cls(DType::kF32, static_cast<GemmTrans>(t))),
                  GemmLibrary::kOpenBlas);
    EXPECT_EQ(c.library_for(cls(DType::kBF16, GemmTrans::kNT)), GemmLibrary::kOneDnn);
    EXPECT_NE(c.summary().find("[ZT_GEMM_F32]"), std::string::npos);
    EXPECT_THROW(select_gemm({"k1", "", "mkl", ""}, std::ref(m)), Error);
}

TEST(GemmSelect, Bf16OverrideDecidesBf16Only) {
    FakeMeasure m;
    GemmChoice c = select_gemm({"k1", "", "", "openblas"}, std::ref(m));
    for (int t = 0; t < kGemmTransCount; ++t)
        EXPECT_EQ(c.library_for(cls(DType::kBF16, static_cast<GemmTrans>(t))),
                  GemmLibrary::kOpenBlas);
    EXPECT_EQ(c.library_for(cls(DType::kF32, GemmTrans::kNT)), GemmLibrary::kOneDnn);
    EXPECT_NE(c.summary().find("[ZT_GEMM_BF16]"), std::string::npos);
    c = select_gemm({"k1", "", "", "onednn-f32"}, std::ref(m));
    EXPECT_EQ(c.library_for(cls(DType::kBF16, GemmTrans::kTN)), GemmLibrary::kOneDnnF32);
    EXPECT_THROW(select_gemm({"k1", "", "", "mkl"}, std::ref(m)), Error);
}

TEST(GemmSelect, CachedPerKeyAndMeasuredAgainWhenTheKeyChanges) {
    TempDir dir;
    FakeMeasure m;
    GemmChoice a = select_gemm({"key A", dir.path, "", ""}, std::ref(m));
    const int first = m.calls;
    EXPECT_GT(first, 0);
    EXPECT_NE(a.source.find("measured"), std::string::npos);
    GemmChoice b = select_gemm({"key A", dir.path, "", ""}, std::ref(m));
    EXPECT_EQ(m.calls, first) << "the second selection must come from the cache";
    EXPECT_NE(b.source.find("cache"), std::string::npos);
    EXPECT_EQ(b.library_for(cls(DType::kF32, GemmTrans::kNN)), GemmLibrary::kOpenBlas);
    EXPECT_DOUBLE_EQ(b.ceiling_flops(DType::kF32), a.ceiling_flops(DType::kF32));
    // Another key (another CPU, library, thread count or variable) measures anew.
    select_gemm({"key A; OPENBLAS_CORETYPE=Haswell", dir.path, "", ""}, std::ref(m));
    EXPECT_EQ(m.calls, 2 * first);
    // The cache must hold the measured rates, not just the verdicts: a different fake now
    // would not change a cached answer.
    struct Always {
        double operator()(GemmLibrary lib, const GemmClass&) {
            return lib == GemmLibrary::kOneDnn ? 1e12 : 1e9;
        }
    };
    GemmChoice c = select_gemm({"key A", dir.path, "", ""}, Always{});
    EXPECT_EQ(c.library_for(cls(DType::kF32, GemmTrans::kNN)), GemmLibrary::kOpenBlas);
}

TEST(GemmSelect, SurvivesACorruptOrForeignCacheFile) {
    TempDir dir;
    FakeMeasure m;
    const std::string path = gemm_cache_path(dir.path, "k");
    for (const std::string& bad : {std::string("{not json"), std::string(""),
                                  std::string("{\"schema\":1,\"key\":\"other\",\"classes\":[]}"),
                                  std::string("{\"schema\":1,\"key\":\"k\",\"classes\":[]}"),
                                  std::string("{\"schema\":1,\"key\":\"k\",\"classes\":[{\"dtype\":"
                                              "\"f32\",\"trans\":\"XY\"}]}")}) {
        std::ofstream(path) << bad;
        const int before = m.calls;
        GemmChoice c = select_gemm({"k", dir.path, "", ""}, std::ref(m));
        EXPECT_GT(m.calls, before) << bad;
        EXPECT_EQ(c.library_for(cls(DType::kF32, GemmTrans::kNN)), GemmLibrary::kOpenBlas);
        // The damaged file was replaced by a good one.
        const int after = m.calls;
        select_gemm({"k", dir.path, "", ""}, std::ref(m));
        EXPECT_EQ(m.calls, after) << bad;
    }
}

TEST(GemmSelect, UnwritableCacheStillMeasures) {
    FakeMeasure m;
    GemmChoice c = select_gemm({"k", "/proc/zt_no_such_dir", "", ""}, std::ref(m));
    EXPECT_GT(m.calls, 0);
    EXPECT_EQ(c.library_for(cls(DType::kF32, GemmTrans::kNN)), GemmLibrary::kOpenBlas);
}

TEST(GemmSelect, ClassesOfTrainingCalls) {
    // forward x W^T, dX = dY W, dW = dY^T X
    EXPECT_EQ(gemm_class_of(DType::kF32, false, true, 2048, 1536, 512).trans, GemmTrans::kNT);
    EXPECT_EQ(gemm_class_of(DType::kF32, false, false, 2048, 512, 1536).trans, GemmTrans::kNN);
    EXPECT_EQ(gemm_class_of(DType::kF32, true, false, 1536, 512, 2048).trans, GemmTrans::kTN);
    EXPECT_EQ(gemm_class_of(DType::kF32, true, true, 8, 8, 8).trans, GemmTrans::kTT);
    EXPECT_EQ(gemm_class_of(DType::kF16, false, false, 64, 64, 64).dtype, DType::kF32);
    // The size bucket splits at kGemmSmallFlops = 2 m n k.
    EXPECT_EQ(gemm_class_of(DType::kBF16, false, false, 64, 64, 64).size, GemmSize::kSmall);
    EXPECT_EQ(gemm_class_of(DType::kBF16, false, false, 256, 256, 256).size, GemmSize::kLarge);
    EXPECT_EQ(gemm_class_name(gemm_class_of(DType::kBF16, true, false, 512, 512, 512)),
              "bf16 TN large");
}

}  // namespace zt

namespace zt {

// Note [Unsupported GEMM]: a candidate this CPU cannot run is measured as 0 FLOP/s (an AVX2 CPU
// and oneDNN's native bf16 product): it is never chosen, even when listed first, the cache keeps
// the zero, and an override naming it is refused with a message naming the variable.
TEST(GemmSelect, UnsupportedCandidateIsNeverChosenNorForced) {
    auto no_native_bf16 = [](GemmLibrary lib, const GemmClass& c) {
        if (c.dtype == DType::kBF16 && lib == GemmLibrary::kOneDnn) return 0.0;
        return lib == GemmLibrary::kOpenBlas ? 100e9 : 150e9;
    };
    TempDir dir;
    const GemmChoice c = select_gemm({"k-avx2", dir.path, "", ""}, no_native_bf16);
    for (int t = 0; t < kGemmTransCount; ++t)
        for (int z = 0; z < kGemmSizeCount; ++z) {
            const GemmClass k{DType::kBF16, static_cast<GemmTrans>(t), static_cast<GemmSize>(z)};
            EXPECT_EQ(c.library_for(k), GemmLibrary::kOneDnnF32) << gemm_class_name(k);
        }
    // The same from the cache file, and the override refused there too.
    const GemmChoice cached = select_gemm({"k-avx2", dir.path, "", ""}, no_native_bf16);
    EXPECT_NE(cached.source.find("cache"), std::string::npos);
    EXPECT_EQ(cached.library_for(cls(DType::kBF16, GemmTrans::kNT)), GemmLibrary::kOneDnnF32);
    try {
        select_gemm({"k-avx2", dir.path, "", "onednn"}, no_native_bf16);
        ADD_FAILURE() << "ZT_GEMM_BF16=onednn was accepted on a machine that cannot run it";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("ZT_GEMM_BF16=onednn"), std::string::npos) << e.what();
    }
    // The widened bf16 override and the f32 ones stay valid.
    EXPECT_EQ(select_gemm({"k-avx2", dir.path, "", "openblas"}, no_native_bf16)
                  .library_for(cls(DType::kBF16, GemmTrans::kNN)),
              GemmLibrary::kOpenBlas);
    EXPECT_EQ(select_gemm({"k-avx2", dir.path, "onednn", ""}, no_native_bf16)
                  .library_for(cls(DType::kF32, GemmTrans::kNN)),
              GemmLibrary::kOneDnn);
}

// A class no candidate can compute is an error, not a silent pick of a zero rate.
TEST(GemmSelect, NoSupportedCandidateIsAnError) {
    EXPECT_THROW(
        select_gemm({"k-none", "", "", ""}, [](GemmLibrary, const GemmClass&) { return 0.0; }),
        Error);
}

}  // namespace zt
