// Tensor: a typed, shaped, strided view of tracked storage. Copies share storage (like PyTorch);
// `clone` copies data. Storage returns its bytes to the pool that made it when the last view dies.
// Kernels take raw pointers; Tensor is the owner and the bookkeeping, not the compute.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/memory.h"
#include "util/error.h"

namespace zt {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "(2, 3, 4)"

class Storage {
public:
    Storage(MemoryPool& pool, size_t bytes, MemCategory category);
    ~Storage();
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }
    MemCategory category() const { return category_; }
    MemoryPool& pool() const { return *pool_; }

private:
    MemoryPool* pool_;
    void* data_;
    size_t bytes_;
    MemCategory category_;
};

class Tensor {
public:
    Tensor() = default;
    // Uninitialized contiguous tensor from `pool`.
    static Tensor empty(MemoryPool& pool, const Shape& shape, DType dtype, MemCategory category);
    static Tensor zeros(MemoryPool& pool, const Shape& shape, DType dtype, MemCategory category);
    // A contiguous view of existing storage at an element offset (used by flat arenas).
    static Tensor view_of(std::shared_ptr<Storage> storage, int64_t offset, const Shape& shape,
                          DType dtype);

    bool defined() const { return storage_ != nullptr; }
    DType dtype() const { return dtype_; }
    const Shape& shape() const { return shape_; }
    const Shape& strides() const { return strides_; }
    int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
    int64_t size(int64_t d) const;  // negative d counts from the end
    int64_t numel() const { return shape_numel(shape_); }
    int64_t offset() const { return offset_; }
    size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
    bool is_contiguous() const;
    const std::shared_ptr<Storage>& storage() const { return storage_; }
    MemCategory category() const { return storage_->category(); }
    MemoryPool& pool() const { return storage_->pool(); }

    void* raw() const;
    template <typename T>
    T* data() const {
        ZT_ASSERT(dtype_of<T>() == dtype_, "tensor is ", dtype_name(dtype_), ", accessed as ",
                  dtype_name(dtype_of<T>()));
        return static_cast<T*>(raw());
    }

    // Views (share storage).
    Tensor reshape(const Shape& shape) const;  // contiguous only
    Tensor slice(int64_t d, int64_t start, int64_t length) const;
    Tensor transpose(int64_t d0, int64_t d1) const;

    // Copies.
    Tensor clone(MemCategory category) const;              // contiguous copy, same dtype
    Tensor to(DType dtype, MemCategory category) const;    // contiguous copy, converted
    void copy_from(const Tensor& src);                     // same shape, any dtypes and strides
    void fill(float value);
    void zero();
    std::vector<float> to_vector() const;  // as f32, logical order

private:
    std::shared_ptr<Storage> storage_;
    DType dtype_ = DType::kF32;
    Shape shape_;
    Shape strides_;  // in elements
    int64_t offset_ = 0;
};

}  // namespace zt
