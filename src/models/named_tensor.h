// One parameter as weight files see it: its name, its shape in zerotrain's layout, and its f32
// storage of numel(shape) elements (a view into the whole-arena master weights).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

struct NamedTensorF32 {
    std::string name;
    std::vector<int64_t> shape;
    float* data;
};

}  // namespace zt
