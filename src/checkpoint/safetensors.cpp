// Safetensors reader (header validation: Note [Safetensors validation]) and writer.
#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/durable_file.h"
#include "tensor/dtype.h"
#include "util/crc32c.h"
#include "util/error.h"

namespace zt {

// Note [Safetensors validation]
// Everything in a file is hostile until checked. In order: the file holds the 8 length bytes;
// N <= kMaxHeaderBytes and 8 + N <= file size; the header is UTF-8 JSON, an object, nested no
// deeper than a valid header is, with no duplicate key; "__metadata__" maps strings to strings;
// each tensor has a known dtype, a shape of non-negative integers, two integer offsets with
// begin <= end <= buffer size and end - begin == numel x element size (products checked for
// overflow). Then, as the reference does, the ranges sorted by offset must tile the buffer: the
// first starts at 0, each starts where the previous ended (an overlap or a gap is an error), the
// last ends at the end of the file. Every message names the file and, where there is one, the
// tensor.

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // 100 MB, the reference implementation's limit
// Depth of a valid header: root object, tensor object, shape array, its numbers. Deeper input
// is rejected while parsing, before it can cost memory.
constexpr int kMaxHeaderDepth = 4;

using nlohmann::json;

// Known dtypes in the reference implementation's enum order (increasing alignment); the writer
// orders data by this rank, largest first, as the reference does.
struct DtypeInfo {
    std::string_view name;
    size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"C64", 8}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};

int dtype_rank(std::string_view dtype) {
    for (size_t i = 0; i < std::size(kDtypes); ++i)
        if (kDtypes[i].name == dtype) return static_cast<int>(i);
    return -1;
}

uint64_t read_u64_le(const std::byte* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint64_t>(p[i]);
    return v;
}

// A JSON value for an error message, cut short: hostile headers can be large.
std::string brief(const json& v) {
    std::string s = v.dump();
    return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

std::string offsets_str(uint64_t begin, uint64_t end) {
    return str_cat("[", begin, ", ", end, "]");
}

// Parses one tensor entry; checks everything that concerns the entry alone.
SafetensorsTensor parse_entry(const std::string& file, const std::string& name, const json& v,
                              uint64_t buffer_bytes) {
    auto where = [&] { return str_cat("safetensors file ", file, ": tensor '", name, "': "); };
    ZT_CHECK(v.is_object(), where(),
             "expected an object with dtype, shape, data_offsets, got a JSON ", v.type_name());
    SafetensorsTensor t;
    t.name = name;
    auto dtype = v.find("dtype");
    ZT_CHECK(dtype != v.end() && dtype->is_string(), where(), "missing or non-string \"dtype\"");
    t.dtype = dtype->get<std::string>();
    const size_t elem = safetensors_dtype_size(t.dtype);
    ZT_CHECK(elem != 0, where(), "unknown dtype \"", t.dtype, "\"");

    auto shape = v.find("shape");
    ZT_CHECK(shape != v.end() && shape->is_array(), where(), "missing or non-array \"shape\"");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : *shape) {
        ZT_CHECK(d.is_number_unsigned(), where(), "shape ", brief(*shape),
                 " has an entry that is not a non-negative integer");
        const uint64_t dim = d.get<uint64_t>();
        ZT_CHECK(dim <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), where(),
                 "shape dimension ", dim, " is too large");
        t.shape.push_back(static_cast<int64_t>(dim));
        overflow = overflow || __builtin_mul_overflow(numel, dim, &numel);
    }
    uint64_t nbytes = 0;
    overflow = overflow || __builtin_mul_overflow(numel, uint64_t{elem}, &nbytes) ||
               numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    ZT_CHECK(!overflow, where(), "the element count of shape ", brief(*shape),
             " overflows 64 bits");
    t.numel = static_cast<int64_t>(numel);

    auto offsets = v.find("data_offsets");
    ZT_CHECK(offsets != v.end() && offsets->is_array() && offsets->size() == 2 &&
                 (*offsets)[0].is_number_unsigned() && (*offsets)[1].is_number_unsigned(),
             where(), "\"data_offsets\" must be [begin, end] with non-negative integers");
    t.begin = (*offsets)[0].get<uint64_t>();
    t.end = (*offsets)[1].get<uint64_t>();
    ZT_CHECK(t.begin <= t.end, where(), "data_offsets ", offsets_str(t.begin, t.end),
             " has begin > end");
    ZT_CHECK(t.end <= buffer_bytes, where(), "data_offsets ", offsets_str(t.begin, t.end),
             " run past the end of the data buffer (", buffer_bytes,
             " bytes); the file is truncated or the header is wrong");
    ZT_CHECK(t.end - t.begin == nbytes, where(), "dtype ", t.dtype, " and shape ", brief(*shape),
             " need ", nbytes, " bytes, but data_offsets ", offsets_str(t.begin, t.end), " hold ",
             t.end - t.begin);
    return t;
}

// The ranges, sorted by offset, must tile [0, buffer_bytes) exactly.
void check_tiling(const std::string& file, const std::vector<SafetensorsTensor>& tensors,
                  uint64_t buffer_bytes) {
    std::vector<const SafetensorsTensor*> order;
    order.reserve(tensors.size());
    for (const auto& t : tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t covered = 0;
    const SafetensorsTensor* prev = nullptr;
    for (const auto* t : order) {
        ZT_CHECK(t->begin >= covered, "safetensors file ", file, ": tensors '", prev->name, "' ",
                 offsets_str(prev->begin, prev->end), " and '", t->name, "' ",
                 offsets_str(t->begin, t->end), " overlap");
        ZT_CHECK(t->begin == covered, "safetensors file ", file, ": bytes ",
                 offsets_str(covered, t->begin), " of the data buffer before tensor '", t->name,
                 "' belong to no tensor");
        covered = t->end;
        prev = t;
    }
    ZT_CHECK(covered == buffer_bytes, "safetensors file ", file, ": the data buffer holds ",
             buffer_bytes, " bytes but the tensors cover only ", covered, " (",
             buffer_bytes - covered, " trailing bytes)");
}

}  // namespace

size_t safetensors_dtype_size(std::string_view dtype) {
    const int rank = dtype_rank(dtype);
    return rank < 0 ? 0 : kDtypes[rank].size;
}

void SafetensorsFile::Unmap::operator()(void* p) const {
    if (p) ::munmap(p, bytes);
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
    SysFd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    ZT_CHECK(f.fd >= 0, "safetensors: cannot open ", path, ": ", std::strerror(errno));
    struct stat st {};
    ZT_CHECK(::fstat(f.fd, &st) == 0, "safetensors: cannot stat ", path, ": ",
             std::strerror(errno));
    ZT_CHECK(S_ISREG(st.st_mode), "safetensors: ", path, " is not a regular file");
    const auto size = static_cast<size_t>(st.st_size);
    ZT_CHECK(size >= 8, "safetensors file ", path, ": ", size,
             " bytes, shorter than the 8-byte header length");
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, f.fd, 0);
    ZT_CHECK(p != MAP_FAILED, "safetensors: cannot map ", path, ": ", std::strerror(errno));
    mapping_ = std::unique_ptr<void, Unmap>(p, Unmap{size});
    file_ = std::span<const std::byte>(static_cast<const std::byte*>(p), size);
    parse();
}

SafetensorsFile::SafetensorsFile(std::span<const std::byte> bytes, std::string label)
    : path_(std::move(label)), file_(bytes) {
    parse();
}

uint64_t safetensors_header_end(std::span<const std::byte> head, uint64_t file_size,
                                const std::string& label) {
    ZT_CHECK(file_size >= 8 && head.size() >= 8, "safetensors file ", label, ": ", file_size,
             " bytes, shorter than the 8-byte header length");
    const uint64_t n = read_u64_le(head.data());
    ZT_CHECK(n <= kMaxHeaderBytes, "safetensors file ", label, ": header length ", n,
             " exceeds the limit of ", kMaxHeaderBytes, " bytes; not a safetensors file?");
    ZT_CHECK(n <= file_size - 8, "safetensors file ", label, ": header length ", n,
             " is larger than the ", file_size - 8, " bytes after the length field");
    return 8 + n;
}

SafetensorsFile SafetensorsFile::header_only(std::span<const std::byte> head, uint64_t file_size,
                                             std::string label) {
    SafetensorsFile f;
    f.path_ = std::move(label);
    f.file_ = head;
    f.header_only_ = true;
    f.parse(file_size);
    f.file_ = {};  // borrowed only while parsing
    return f;
}

void SafetensorsFile::parse() { parse(file_.size()); }

void SafetensorsFile::parse(uint64_t file_size) {
    const std::string& file = path_;
    const uint64_t end = safetensors_header_end(file_, file_size, file);
    ZT_ASSERT(file_.size() >= end, "safetensors: parse needs the whole header");
    const uint64_t n = end - 8;
    const char* text = reinterpret_cast<const char*>(file_.data() + 8);
    const uint64_t buffer_bytes = file_size - end;
    if (!header_only_) buffer_ = file_.subspan(end);

    std::set<std::string> keys;
    auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
        ZT_CHECK(depth <= kMaxHeaderDepth, "safetensors file ", file,
                 ": header nested deeper than a safetensors header can be");
        if (event == json::parse_event_t::key && depth == 1) {
            const auto& key = parsed.get_ref<const std::string&>();
            ZT_CHECK(keys.insert(key).second, "safetensors file ", file, ": key '", key,
                     "' appears twice in the header");
        }
        return true;
    };
    json header;
    try {
        header = json::parse(text, text + n, on_event);
    } catch (const json::exception& e) {
        ZT_FAIL("safetensors file ", file, ": header is not valid JSON: ", e.what());
    }
    ZT_CHECK(header.is_object(), "safetensors file ", file,
             ": header must be a JSON object, got a JSON ", header.type_name());

    for (const auto& [name, value] : header.items()) {
        if (name == "__metadata__") {
            ZT_CHECK(value.is_object(), "safetensors file ", file,
                     ": __metadata__ must be an object of strings");
            for (const auto& [k, v] : value.items()) {
                ZT_CHECK(v.is_string(), "safetensors file ", file, ": __metadata__ key '", k,
                         "' has a JSON ", v.type_name(), " value; metadata values are strings");
                metadata_[k] = v.get<std::string>();
            }
            continue;
        }
        tensors_.push_back(parse_entry(file, name, value, buffer_bytes));
    }
    // nlohmann's object is a std::map: items() come sorted by name already.
    check_tiling(file, tensors_, buffer_bytes);
    data_begin_ = end;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
    auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                               [](const SafetensorsTensor& t, std::string_view n) {
                                   return std::string_view(t.name) < n;
                               });
    return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const SafetensorsTensor& SafetensorsFile::tensor(std::string_view name) const {
    const SafetensorsTensor* t = find(name);
    ZT_CHECK(t != nullptr, "safetensors file ", path_, ": no tensor named '", name, "'");
    return *t;
}

std::span<const std::byte> SafetensorsFile::data(std::string_view name) const {
    ZT_ASSERT(!header_only_, "safetensors: ", path_, " was parsed from its header only");
    const SafetensorsTensor& t = tensor(name);
    return buffer_.subspan(t.begin, t.end - t.begin);
}

void SafetensorsFile::read_f32(std::string_view name, float* out, int64_t n) const {
    const SafetensorsTensor& t = tensor(name);
    DType src_dtype;
    if (t.dtype == "F32") {
        src_dtype = DType::kF32;
    } else if (t.dtype == "BF16") {
        src_dtype = DType::kBF16;
    } else if (t.dtype == "F16") {
        src_dtype = DType::kF16;
    } else {
        ZT_FAIL("safetensors file ", path_, ": tensor '", name, "' has dtype ", t.dtype,
                "; only F32, BF16 and F16 convert to f32");
    }
    ZT_CHECK(n == t.numel, "safetensors file ", path_, ": tensor '", name, "' has ", t.numel,
             " elements, the caller expects ", n);
    const std::byte* src = buffer_.data() + t.begin;
    const size_t elem = dtype_size(src_dtype);
    if (src_dtype == DType::kF32) {
        if (n > 0) std::memcpy(out, src, static_cast<size_t>(n) * 4);
        return;
    }
    if (reinterpret_cast<uintptr_t>(src) % elem == 0) {
        convert(src, src_dtype, out, DType::kF32, static_cast<size_t>(n));
        return;
    }
    // Misaligned half-precision data: stage chunks through an aligned buffer.
    constexpr size_t kChunk = 4096;  // elements
    uint16_t staged[kChunk];
    for (size_t i = 0; i < static_cast<size_t>(n); i += kChunk) {
        const size_t m = std::min(kChunk, static_cast<size_t>(n) - i);
        std::memcpy(staged, src + i * elem, m * elem);
        convert(staged, src_dtype, out + i, DType::kF32, m);
    }
}

// ---- writer ----

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace

void SafetensorsWriter::check_entry(const std::string& name, const std::string& dtype,
                                    const std::vector<int64_t>& shape, size_t bytes) const {
    ZT_CHECK(name != "__metadata__", "safetensors writer: '__metadata__' is the header's ",
             "metadata key and cannot name a tensor");
    ZT_CHECK(!names_.contains(name), "safetensors writer: tensor '", name, "' added twice");
    const size_t elem = safetensors_dtype_size(dtype);
    ZT_CHECK(elem != 0, "safetensors writer: tensor '", name, "': unknown dtype \"", dtype,
             "\"; expected F32, BF16, F16, I64, U8, ...");
    uint64_t need = elem;
    bool overflow = false;
    for (int64_t d : shape) {
        ZT_CHECK(d >= 0, "safetensors writer: tensor '", name, "': negative dimension in shape ",
                 shape_str(shape));
        overflow = overflow || __builtin_mul_overflow(need, static_cast<uint64_t>(d), &need);
    }
    ZT_CHECK(!overflow && need == bytes, "safetensors writer: tensor '", name, "': dtype ", dtype,
             " and shape ", shape_str(shape), " need ",
             overflow ? "more than 2^64" : std::to_string(need), " bytes, got ", bytes);
}

void SafetensorsWriter::add(std::string name, std::string dtype, std::vector<int64_t> shape,
                            const void* data, size_t bytes) {
    check_entry(name, dtype, shape, bytes);
    ZT_CHECK(data != nullptr || bytes == 0, "safetensors writer: tensor '", name, "': null data");
    names_.insert(name);
    entries_.push_back(Entry{std::move(name), std::move(dtype), std::move(shape), data, bytes});
}

void SafetensorsWriter::add_source(std::string name, std::string dtype, std::vector<int64_t> shape,
                                   size_t bytes, Source source) {
    check_entry(name, dtype, shape, bytes);
    ZT_CHECK(source != nullptr, "safetensors writer: tensor '", name, "': no source");
    names_.insert(name);
    entries_.push_back(Entry{std::move(name), std::move(dtype), std::move(shape), nullptr, bytes,
                             std::move(source)});
}

void SafetensorsWriter::for_each_piece(const Entry& e,
                                       const std::function<void(const void*, size_t)>& put) {
    if (!e.source) {
        put(e.data, e.bytes);
        return;
    }
    const size_t elem = safetensors_dtype_size(e.dtype);
    const size_t piece = std::max<size_t>((size_t{64} << 20) / elem, 1) * elem;
    std::vector<std::byte> buf(std::min(piece, e.bytes));
    for (size_t at = 0; at < e.bytes; at += piece) {
        const size_t n = std::min(piece, e.bytes - at);
        e.source(at, buf.data(), n);
        put(buf.data(), n);
    }
}

void SafetensorsWriter::add_metadata(std::string key, std::string value) {
    metadata_[std::move(key)] = std::move(value);
}

std::vector<const SafetensorsWriter::Entry*> SafetensorsWriter::data_order() const {
    std::vector<const Entry*> order;
    order.reserve(entries_.size());
    for (const auto& e : entries_) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
        const int ra = dtype_rank(a->dtype), rb = dtype_rank(b->dtype);
        return ra != rb ? ra > rb : a->name < b->name;
    });
    return order;
}

std::string SafetensorsWriter::header(const std::vector<const Entry*>& order) const {
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata_.empty()) {
        auto& m = h["__metadata__"] = nlohmann::ordered_json::object();
        for (const auto& [k, v] : metadata_) m[k] = v;
    }
    uint64_t offset = 0;
    for (const Entry* e : order) {
        nlohmann::ordered_json t;
        t["dtype"] = e->dtype;
        t["shape"] = e->shape;
        t["data_offsets"] = {offset, offset + e->bytes};
        h[e->name] = std::move(t);
        offset += e->bytes;
    }
    std::string s;
    try {
        s = h.dump();
    } catch (const nlohmann::json::exception& e) {
        ZT_FAIL("safetensors writer: tensor names and metadata must be valid UTF-8: ", e.what());
    }
    s.append((8 - s.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as in the reference
    return s;
}

std::vector<std::byte> SafetensorsWriter::serialize() const {
    const auto order = data_order();
    const std::string head = header(order);
    std::vector<std::byte> out(8);
    for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(uint64_t{head.size()} >> (8 * i));
    const auto* h = reinterpret_cast<const std::byte*>(head.data());
    out.insert(out.end(), h, h + head.size());
    for (const Entry* e : order)
        for_each_piece(*e, [&](const void* data, size_t n) {
            const auto* d = static_cast<const std::byte*>(data);
            out.insert(out.end(), d, d + n);
        });
    return out;
}

WrittenFile SafetensorsWriter::write(const std::string& path, const DirectIoOptions& io) const {
    const auto order = data_order();
    const std::string head = header(order);
    const std::string tmp = path + ".tmp";
    try {
        DirectFileWriter w(tmp, io);
        unsigned char len[8];
        for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(head.size() >> (8 * i));
        w.append(len, 8);
        w.append(head.data(), head.size());
        for (const Entry* e : order)
            for_each_piece(*e, [&](const void* data, size_t n) { w.append(data, n); });
        const WrittenFile out = w.finish();
        ZT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "safetensors writer: cannot rename ",
                 tmp, " to ", path, ": ", std::strerror(errno));
        fsync_parent_dir(path);
        return out;
    } catch (...) {
        ::unlink(tmp.c_str());
        throw;
    }
}

}  // namespace zt
