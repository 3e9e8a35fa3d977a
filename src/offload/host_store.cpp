#include "offload/host_store.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace zt {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

void* alloc_host_buffer(size_t bytes) {
    const size_t n = (bytes + kStoreAlign - 1) / kStoreAlign * kStoreAlign;
    const size_t align = n >= kHugePage ? kHugePage : kStoreAlign;
    void* p = std::aligned_alloc(align, (n + align - 1) / align * align);
    ZT_CHECK(p != nullptr, "offload: could not allocate ", n, " bytes of host memory");
    if (n >= kHugePage) ::madvise(p, n, MADV_HUGEPAGE);  // a hint; failure changes nothing
    std::memset(p, 0, n);
    return p;
}

void free_host_buffer(void* p) { std::free(p); }

HostStore::HostStore(uint64_t bytes)
    : bytes_((bytes + kStoreAlign - 1) / kStoreAlign * kStoreAlign),
      data_(static_cast<std::byte*>(alloc_host_buffer(bytes_))) {}

HostStore::~HostStore() { free_host_buffer(data_); }

void HostStore::check(uint64_t offset, const void* buf, size_t bytes, const char* what) const {
    ZT_ASSERT(offset % kStoreAlign == 0 && bytes % kStoreAlign == 0 &&
                  reinterpret_cast<uintptr_t>(buf) % kStoreAlign == 0,
              "HostStore::", what, ": offset ", offset, ", size ", bytes,
              " or buffer not aligned to ", kStoreAlign);
    ZT_ASSERT(offset <= bytes_ && bytes <= bytes_ - offset, "HostStore::", what, ": [", offset,
              ", ", offset + bytes, ") outside the store of ", bytes_, " bytes");
}

Store::Ticket HostStore::read(uint64_t offset, void* dst, size_t bytes) {
    check(offset, dst, bytes, "read");
    std::memcpy(dst, data_ + offset, bytes);
    stats_.bytes_read += bytes;
    return next_++;
}

Store::Ticket HostStore::write(uint64_t offset, const void* src, size_t bytes) {
    check(offset, src, bytes, "write");
    std::memcpy(data_ + offset, src, bytes);
    stats_.bytes_written += bytes;
    return next_++;
}

void HostStore::wait(Ticket t) {
    ZT_ASSERT(t > 0 && t < next_, "HostStore::wait: unknown ticket ", t);
}

}  // namespace zt
