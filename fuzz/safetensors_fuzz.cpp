// libFuzzer target for the safetensors reader: any input is either rejected with zt::Error or
// yields a file whose every tensor can be read in full, without a read out of bounds.
// Built and run by scripts/fuzz.sh (CI runs it from scripts/test.sh: clang, libFuzzer, ASan + UBSan,
// 45 s, -seed=1, seeds from fuzz/make_seeds.py, dictionary fuzz/safetensors.dict). By hand:
//
//   ZT_FUZZ_SECONDS=600 bash scripts/fuzz.sh safetensors
//   cp some/*.safetensors build-fuzz/corpus/safetensors/   # more seeds, optional
//
// A crash leaves build-fuzz/artifacts/safetensors-crash-<sha1>; rerun it with
// build-fuzz/safetensors_fuzz build-fuzz/artifacts/safetensors-crash-<sha1>.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "checkpoint/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        const zt::SafetensorsFile file(
            std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size), "fuzz");
        uint64_t sum = 0;
        std::vector<float> out;
        for (const auto& t : file.tensors()) {
            for (std::byte b : file.data(t.name)) sum += static_cast<uint64_t>(b);
            // numel is bounded by the input size once the header validated.
            if (t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16") {
                out.resize(static_cast<size_t>(t.numel));
                file.read_f32(t.name, out.data(), t.numel);
            }
        }
        for (const auto& [k, v] : file.metadata()) sum += k.size() + v.size();
        volatile uint64_t sink = sum;
        (void)sink;
    } catch (const zt::Error&) {
        // Rejected input: the expected outcome for almost every mutation.
    }
    return 0;
}
