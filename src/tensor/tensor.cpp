#include "tensor/tensor.h"

#include <cstring>
#include <numeric>
#include <sstream>

namespace zt {

int64_t shape_numel(const Shape& shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
}

std::string shape_str(const Shape& shape) {
    std::ostringstream os;
    os << "(";
    for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
    os << ")";
    return os.str();
}

Storage::Storage(MemoryPool& pool, size_t bytes, MemCategory category)
    : pool_(&pool), data_(pool.allocate(bytes, category)), bytes_(bytes), category_(category) {}

Storage::~Storage() { pool_->release(data_, bytes_, category_); }

namespace {
Shape contiguous_strides(const Shape& shape) {
    Shape strides(shape.size());
    int64_t s = 1;
    for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
        strides[i] = s;
        s *= shape[i];
    }
    return strides;
}
}  // namespace

Tensor Tensor::empty(MemoryPool& pool, const Shape& shape, DType dtype, MemCategory category) {
    for (int64_t s : shape) ZT_ASSERT(s >= 0, "negative size in shape ", shape_str(shape));
    Tensor t;
    t.storage_ = std::make_shared<Storage>(pool, shape_numel(shape) * dtype_size(dtype), category);
    t.dtype_ = dtype;
    t.shape_ = shape;
    t.strides_ = contiguous_strides(shape);
    return t;
}

Tensor Tensor::zeros(MemoryPool& pool, const Shape& shape, DType dtype, MemCategory category) {
    Tensor t = empty(pool, shape, dtype, category);
    std::memset(t.raw(), 0, t.nbytes());
    return t;
}

Tensor Tensor::view_of(std::shared_ptr<Storage> storage, int64_t offset, const Shape& shape,
                       DType dtype) {
    ZT_ASSERT(static_cast<size_t>(offset + shape_numel(shape)) * dtype_size(dtype) <=
                  storage->bytes(),
              "view past the end of its storage");
    Tensor t;
    t.storage_ = std::move(storage);
    t.dtype_ = dtype;
    t.shape_ = shape;
    t.strides_ = contiguous_strides(shape);
    t.offset_ = offset;
    return t;
}

int64_t Tensor::size(int64_t d) const {
    if (d < 0) d += dim();
    ZT_ASSERT(d >= 0 && d < dim(), "dimension ", d, " out of range for shape ", shape_str(shape_));
    return shape_[d];
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

void* Tensor::raw() const {
    ZT_ASSERT(storage_ != nullptr, "use of an undefined tensor");
    return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

Tensor Tensor::reshape(const Shape& shape) const {
    ZT_ASSERT(is_contiguous(), "reshape of a non-contiguous tensor");
    Shape s = shape;
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == -1) infer = static_cast<int64_t>(i);
        else known *= s[i];
    }
    if (infer >= 0) s[infer] = known == 0 ? 0 : numel() / known;
    ZT_ASSERT(shape_numel(s) == numel(), "cannot reshape ", shape_str(shape_), " to ",
              shape_str(shape));
    Tensor t = *this;
    t.shape_ = s;
    t.strides_ = contiguous_strides(s);
    return t;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t length) const {
    if (d < 0) d += dim();
    ZT_ASSERT(d >= 0 && d < dim() && start >= 0 && start + length <= shape_[d],
              "slice out of range");
    Tensor t = *this;
    t.offset_ += start * strides_[d];
    t.shape_[d] = length;
    return t;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
    if (d0 < 0) d0 += dim();
    if (d1 < 0) d1 += dim();
    Tensor t = *this;
    std::swap(t.shape_[d0], t.shape_[d1]);
    std::swap(t.strides_[d0], t.strides_[d1]);
    return t;
}

Tensor Tensor::clone(MemCategory category) const { return to(dtype_, category); }

Tensor Tensor::to(DType dtype, MemCategory category) const {
    Tensor t = empty(pool(), shape_, dtype, category);
    t.copy_from(*this);
    return t;
}

namespace {
// Calls fn(dst_offset, src_offset) for each element, in logical order.
template <typename Fn>
void for_each_index(const Shape& shape, const Shape& a_strides, const Shape& b_strides, Fn fn) {
    int64_t n = shape_numel(shape);
    if (n == 0) return;
    std::vector<int64_t> idx(shape.size(), 0);
    int64_t a = 0, b = 0;
    for (int64_t k = 0; k < n; ++k) {
        fn(a, b);
        for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
            if (++idx[d] < shape[d]) {
                a += a_strides[d];
                b += b_strides[d];
                break;
            }
            a -= a_strides[d] * (shape[d] - 1);
            b -= b_strides[d] * (shape[d] - 1);
            idx[d] = 0;
        }
    }
}
}  // namespace

void Tensor::copy_from(const Tensor& src) {
    ZT_ASSERT(src.shape_ == shape_, "copy from ", shape_str(src.shape_), " to ", shape_str(shape_));
    if (is_contiguous() && src.is_contiguous()) {
        convert(src.raw(), src.dtype_, raw(), dtype_, static_cast<size_t>(numel()));
        return;
    }
    char* d = static_cast<char*>(raw());
    const char* s = static_cast<const char*>(src.raw());
    size_t ds = dtype_size(dtype_), ss = dtype_size(src.dtype_);
    for_each_index(shape_, strides_, src.strides_, [&](int64_t a, int64_t b) {
        convert(s + b * ss, src.dtype_, d + a * ds, dtype_, 1);
    });
}

void Tensor::fill(float value) {
    ZT_ASSERT(is_contiguous(), "fill of a non-contiguous tensor");
    int64_t n = numel();
    if (dtype_ == DType::kF32) {
        float* p = data<float>();
        for (int64_t i = 0; i < n; ++i) p[i] = value;
    } else {
        uint16_t bits = dtype_ == DType::kBF16 ? f32_to_bf16(value).bits : f32_to_f16(value).bits;
        uint16_t* p = static_cast<uint16_t*>(raw());
        for (int64_t i = 0; i < n; ++i) p[i] = bits;
    }
}

void Tensor::zero() {
    ZT_ASSERT(is_contiguous(), "zero of a non-contiguous tensor");
    std::memset(raw(), 0, nbytes());
}

std::vector<float> Tensor::to_vector() const {
    std::vector<float> out(static_cast<size_t>(numel()));
    const char* s = static_cast<const char*>(raw());
    size_t ss = dtype_size(dtype_);
    Shape out_strides = contiguous_strides(shape_);
    for_each_index(shape_, out_strides, strides_, [&](int64_t a, int64_t b) {
        convert(s + b * ss, dtype_, &out[a], DType::kF32, 1);
    });
    return out;
}

}  // namespace zt
