// One parameter as weight files see it: its name, its shape in zerotrain's layout, and its f32
// storage of numel(shape) elements (a view into the whole-arena master weights).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace zt {

struct NamedTensorF32 {
    std::string name;
    std::vector<int64_t> shape;
    float* data;
    // Instead of data (null), elements [first, first + count) on demand, in increasing order
    // (tensors too large for memory: write_named_weights writes them a piece at a time).
    std::function<void(int64_t first, int64_t count, float* dst)> read = {};
};

// "F32", "BF16" or "F16": the safetensors dtypes weights may be read from or written in.
bool is_float_dtype(const std::string& dtype);
// "[2, 3]", for messages.
std::string weight_shape_str(const std::vector<int64_t>& shape);

// Writes params under their names (as they are), converted to `dtype` ("F32", "BF16" or "F16"),
// with metadata {"format": "pt", "producer": "zerotrain"}, atomically. `who` names the caller in
// errors ("export_gpt_weights").
void write_named_weights(const std::string& path, std::span<const NamedTensorF32> params,
                         const std::string& dtype, const std::string& who);

// Fills every param from the tensor of the same name, converting F32/BF16/F16 to f32. Errors
// (each naming the file and tensor): a missing tensor, a shape that differs, a dtype that is not
// floating, a tensor no param claims. Everything is checked before the first param is written.
void read_named_weights(const std::string& path, std::span<NamedTensorF32> params,
                        const std::string& who);

}  // namespace zt
