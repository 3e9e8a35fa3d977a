// libFuzzer target for the safetensors reader: any input is either rejected with zt::Error or
// yields a file whose every tensor can be read in full, without a read out of bounds.
// Not part of the CMake build. Build and run from the repository root with clang:
//
//   clang++ -std=c++20 -g -O1 -march=native -fsanitize=fuzzer,address,undefined -Isrc
//       -o /tmp/safetensors_fuzz fuzz/safetensors_fuzz.cpp src/checkpoint/safetensors.cpp
//       src/tensor/dtype.cpp src/util/error.cpp            (one command: join the lines)
//   mkdir -p /tmp/st_corpus && cp some/*.safetensors /tmp/st_corpus/   # seeds, optional
//   /tmp/safetensors_fuzz -max_len=65536 -max_total_time=600 /tmp/st_corpus
//
// A crash leaves crash-<sha1> in the working directory; rerun it with
// /tmp/safetensors_fuzz crash-<sha1>.
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
