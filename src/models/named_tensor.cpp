#include "models/named_tensor.h"

#include <set>

#include "checkpoint/safetensors.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace zt {

bool is_float_dtype(const std::string& dtype) {
    return dtype == "F32" || dtype == "BF16" || dtype == "F16";
}

std::string weight_shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

namespace {

int64_t numel(const NamedTensorF32& p) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    return n;
}

}  // namespace

void write_named_weights(const std::string& path, std::span<const NamedTensorF32> params,
                         const std::string& dtype, const std::string& who) {
    ZT_CHECK(is_float_dtype(dtype), who, ": dtype \"", dtype,
             "\" is not supported; expected F32, BF16 or F16");
    SafetensorsWriter writer;
    std::vector<std::vector<uint16_t>> converted;  // half-precision copies, alive until write()
    converted.reserve(params.size());
    for (const NamedTensorF32& p : params) {
        const auto n = static_cast<size_t>(numel(p));
        if (!p.data && p.read) {  // read a piece at a time, converted as it comes
            const size_t elem = dtype == "F32" ? sizeof(float) : sizeof(uint16_t);
            writer.add_source(p.name, dtype, p.shape, n * elem,
                              [&p, elem, dtype](uint64_t offset, void* dst, size_t bytes) {
                                  const auto first = static_cast<int64_t>(offset / elem);
                                  const auto count = static_cast<int64_t>(bytes / elem);
                                  if (elem == sizeof(float)) {
                                      p.read(first, count, static_cast<float*>(dst));
                                      return;
                                  }
                                  std::vector<float> f(static_cast<size_t>(count));
                                  p.read(first, count, f.data());
                                  convert(f.data(), DType::kF32, dst,
                                          dtype == "BF16" ? DType::kBF16 : DType::kF16,
                                          static_cast<size_t>(count));
                              });
            continue;
        }
        ZT_CHECK(p.data != nullptr || n == 0, who, ": param '", p.name, "' has no data");
        if (dtype == "F32") {
            writer.add(p.name, dtype, p.shape, p.data, n * sizeof(float));
            continue;
        }
        auto& half = converted.emplace_back(n);
        if (n > 0)
            convert(p.data, DType::kF32, half.data(), dtype == "BF16" ? DType::kBF16 : DType::kF16,
                    n);
        writer.add(p.name, dtype, p.shape, half.data(), n * sizeof(uint16_t));
    }
    writer.add_metadata("format", "pt");
    writer.add_metadata("producer", "zerotrain");
    writer.write(path);
}

void read_named_weights(const std::string& path, std::span<NamedTensorF32> params,
                        const std::string& who) {
    const SafetensorsFile file(path);
    std::set<std::string> names;
    for (const NamedTensorF32& p : params) {
        ZT_CHECK(names.insert(p.name).second, who, ": param '", p.name, "' listed twice");
        const SafetensorsTensor* t = file.find(p.name);
        ZT_CHECK(t, who, ": ", path, " lacks tensor '", p.name,
                 "'; is it a checkpoint of this model configuration?");
        ZT_CHECK(t->shape == p.shape, who, ": ", path, ": tensor '", p.name, "': expected shape ",
                 weight_shape_str(p.shape), ", got ", weight_shape_str(t->shape));
        ZT_CHECK(is_float_dtype(t->dtype), who, ": ", path, ": tensor '", p.name, "' has dtype ",
                 t->dtype, "; expected F32, BF16 or F16");
    }
    for (const SafetensorsTensor& t : file.tensors())
        ZT_CHECK(names.contains(t.name), who, ": ", path, " holds tensor '", t.name,
                 "' that the model has no parameter for; is it a checkpoint of this model "
                 "configuration?");
    for (NamedTensorF32& p : params) file.read_f32(p.name, p.data, numel(p));
}

}  // namespace zt
