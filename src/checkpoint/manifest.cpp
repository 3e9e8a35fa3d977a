#include "checkpoint/manifest.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "checkpoint/durable_file.h"
#include "checkpoint/sealed_text.h"
#include "util/error.h"

namespace zt {

using json = nlohmann::json;

json manifest_to_json(const Manifest& m) {
    json params = json::array();
    for (const CheckpointParam& p : m.params) {
        params.push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}});
        if (p.split_dim >= 0)
            params.back()["split"] = {{"dim", p.split_dim}, {"blocks", p.split_blocks}};
        if (m.pp > 1) params.back()["stage"] = p.stage;
    }
    json files = json::array();
    for (const CheckpointFile& f : m.files) {
        files.push_back({{"file", f.file},
                         {"rank", f.rank},
                         {"range", {f.lo, f.hi}},
                         {"bytes", f.bytes},
                         {"crc32c", f.crc32c}});
        if (m.tp > 1) files.back()["tp_part"] = f.tp_part;
        if (m.pp > 1) files.back()["pp_stage"] = f.pp_stage;
    }
    json model = {{"numel", m.numel}, {"params", params}};
    if (m.pp > 1) model["stage_numel"] = m.stage_numel;
    return {{"format", kCheckpointFormat},
            {"format_version", kCheckpointFormatVersion},
            {"step", m.step},
            {"updates", m.updates},
            {"layout",
             {{"ranks", m.ranks},
              {"dp", m.dp},
              {"tp", m.tp},
              {"pp", m.pp},
              {"zero_stage", m.zero_stage},
              {"compute_dtype", m.compute_dtype},
              {"grad_dtype", m.grad_dtype}}},
            {"model", model},
            {"optimizer", m.optimizer},
            {"tensors", m.tensors},
            {"files", files},
            {"trainer", m.trainer}};
}

namespace {

// Typed access with errors that name the manifest and the key.
class Reader {
  public:
    explicit Reader(std::string where) : where_(std::move(where)) {}

    const json& at(const json& j, const std::string& key) const {
        ZT_CHECK(j.is_object() && j.contains(key), where_, ": missing \"", key, "\"");
        return j.at(key);
    }
    int64_t integer(const json& j, const std::string& key, int64_t lo, int64_t hi) const {
        const json& v = at(j, key);
        ZT_CHECK(v.is_number_integer(), where_, ": \"", key, "\" is not an integer");
        const int64_t x = v.get<int64_t>();
        ZT_CHECK(x >= lo && x <= hi, where_, ": \"", key, "\" is ", x, ", outside [", lo, ", ", hi,
                 "]");
        return x;
    }
    uint64_t unsigned_integer(const json& j, const std::string& key, uint64_t hi) const {
        const json& v = at(j, key);
        ZT_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), where_,
                 ": \"", key, "\" is not a non-negative integer");
        const uint64_t x = v.get<uint64_t>();
        ZT_CHECK(x <= hi, where_, ": \"", key, "\" is ", x, ", above ", hi);
        return x;
    }
    std::string string(const json& j, const std::string& key) const {
        const json& v = at(j, key);
        ZT_CHECK(v.is_string(), where_, ": \"", key, "\" is not a string");
        return v.get<std::string>();
    }
    const json& array(const json& j, const std::string& key) const {
        const json& v = at(j, key);
        ZT_CHECK(v.is_array(), where_, ": \"", key, "\" is not an array");
        return v;
    }
    const std::string& where() const { return where_; }

  private:
    std::string where_;
};

constexpr int64_t kMaxElems = int64_t{1} << 50;  // far above any arena; keeps sums from overflowing

bool plain_file_name(const std::string& s) {
    return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
           s.find('\0') == std::string::npos;
}

}  // namespace

Manifest parse_manifest(const json& j, const std::string& where) {
    Reader r(where);
    ZT_CHECK(j.is_object(), where, ": not a JSON object");
    const std::string format = r.string(j, "format");
    ZT_CHECK(format == kCheckpointFormat, where, ": format \"", format, "\", expected \"",
             kCheckpointFormat, "\"");
    const int64_t version = r.integer(j, "format_version", 1, INT32_MAX);
    ZT_CHECK(version <= kCheckpointFormatVersion, where, ": written by a newer zerotrain (format ",
             "version ", version, "); this one reads up to version ", kCheckpointFormatVersion);
    Manifest m;
    m.step = r.integer(j, "step", 0, kMaxElems);
    m.updates = r.integer(j, "updates", 0, m.step);
    const json& lay = r.at(j, "layout");
    m.ranks = static_cast<int>(r.integer(lay, "ranks", 1, 1 << 24));
    m.dp = static_cast<int>(r.integer(lay, "dp", 1, m.ranks));
    m.tp = static_cast<int>(r.integer(lay, "tp", 1, m.ranks));
    m.pp = static_cast<int>(r.integer(lay, "pp", 1, m.ranks));
    // dp x tp <= 2^48 cannot overflow; the product with pp could, so divide instead.
    ZT_CHECK(m.ranks % m.pp == 0 && int64_t{m.dp} * m.tp == m.ranks / m.pp, where, ": dp ", m.dp,
             " x tp ", m.tp, " x pp ", m.pp, " is not the ", m.ranks, " ranks");
    m.zero_stage = static_cast<int>(r.integer(lay, "zero_stage", 0, 3));
    m.compute_dtype = r.string(lay, "compute_dtype");
    m.grad_dtype = r.string(lay, "grad_dtype");

    const json& model = r.at(j, "model");
    m.numel = r.integer(model, "numel", 0, kMaxElems);
    if (m.pp > 1) {
        const json& sn = r.array(model, "stage_numel");
        ZT_CHECK(sn.size() == static_cast<size_t>(m.pp), where, ": \"stage_numel\" has ", sn.size(),
                 " entries for ", m.pp, " pipeline stages");
        for (const json& n : sn) {
            ZT_CHECK(
                n.is_number_integer() && n.get<int64_t>() >= 0 && n.get<int64_t>() <= kMaxElems,
                where, ": a bad \"stage_numel\" entry");
            m.stage_numel.push_back(n.get<int64_t>());
        }
        ZT_CHECK(m.stage_numel[0] == m.numel, where, ": \"numel\" is not stage 0's");
    }
    std::set<std::pair<int, std::string>> names;
    for (const json& p : r.array(model, "params")) {
        CheckpointParam cp;
        cp.name = r.string(p, "name");
        cp.stage = p.contains("stage") ? static_cast<int>(r.integer(p, "stage", 0, m.pp - 1)) : 0;
        ZT_CHECK(names.insert({cp.stage, cp.name}).second, where, ": parameter \"", cp.name,
                 "\" twice");
        int64_t numel = 1;
        for (const json& d : r.array(p, "shape")) {
            ZT_CHECK(
                d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() <= kMaxElems,
                where, ": parameter \"", cp.name, "\" has a bad shape");
            cp.shape.push_back(d.get<int64_t>());
            ZT_CHECK(cp.shape.back() == 0 || numel <= kMaxElems / cp.shape.back(), where,
                     ": parameter \"", cp.name, "\" is too large");
            numel *= cp.shape.back();
        }
        if (p.contains("split")) {
            const json& sp = p["split"];
            cp.split_dim = static_cast<int>(
                r.integer(sp, "dim", 0, static_cast<int64_t>(cp.shape.size()) - 1));
            cp.split_blocks = r.integer(sp, "blocks", 1, kMaxElems);
            const int64_t n = cp.shape[static_cast<size_t>(cp.split_dim)];
            ZT_CHECK(n % (cp.split_blocks * m.tp) == 0, where, ": parameter \"", cp.name,
                     "\" splits ", n, " along dimension ", cp.split_dim, " into ", cp.split_blocks,
                     " blocks x ", m.tp, " parts, which do not divide it");
            numel /= m.tp;  // each part's
        }
        const int64_t arena = m.numel_of(cp.stage);
        cp.offset = r.integer(p, "offset", 0, arena);
        ZT_CHECK(cp.offset + numel <= arena, where, ": parameter \"", cp.name,
                 "\" runs past the arena of ", arena, " elements");
        m.params.push_back(std::move(cp));
    }
    m.optimizer = r.string(j, "optimizer");
    std::set<std::string> tnames;
    for (const json& t : r.array(j, "tensors")) {
        ZT_CHECK(t.is_string() && !t.get<std::string>().empty(), where, ": bad tensor name");
        ZT_CHECK(tnames.insert(t.get<std::string>()).second, where, ": tensor \"",
                 t.get<std::string>(), "\" twice");
        m.tensors.push_back(t.get<std::string>());
    }
    ZT_CHECK(!m.tensors.empty() && m.tensors[0] == "master", where,
             ": the first tensor must be \"master\"");
    int64_t next = 0;  // each (stage, part)'s ranges must tile [0, its numel) in order
    int part = 0, stage = 0;
    std::set<std::string> fnames;
    for (const json& f : r.array(j, "files")) {
        CheckpointFile cf;
        cf.file = r.string(f, "file");
        ZT_CHECK(plain_file_name(cf.file), where, ": file name \"", cf.file,
                 "\" is not a plain name inside the checkpoint");
        ZT_CHECK(fnames.insert(cf.file).second, where, ": file \"", cf.file, "\" twice");
        cf.rank = static_cast<int>(r.integer(f, "rank", 0, m.ranks - 1));
        const json& range = r.array(f, "range");
        ZT_CHECK(range.size() == 2 && range[0].is_number_integer() && range[1].is_number_integer(),
                 where, ": file \"", cf.file, "\" has a bad range");
        cf.lo = range[0].get<int64_t>();
        cf.hi = range[1].get<int64_t>();
        cf.tp_part =
            f.contains("tp_part") ? static_cast<int>(r.integer(f, "tp_part", 0, m.tp - 1)) : 0;
        cf.pp_stage =
            f.contains("pp_stage") ? static_cast<int>(r.integer(f, "pp_stage", 0, m.pp - 1)) : 0;
        if (cf.tp_part != part || cf.pp_stage != stage) {
            const bool next_part = cf.pp_stage == stage && cf.tp_part == part + 1;
            const bool next_stage = cf.pp_stage == stage + 1 && cf.tp_part == 0 && part == m.tp - 1;
            ZT_CHECK((next_part || next_stage) && next == m.numel_of(stage), where, ": file \"",
                     cf.file, "\" starts tp part ", cf.tp_part, " of pp stage ", cf.pp_stage,
                     " after part ", part, " of stage ", stage, " covered [0, ", next, ") of ",
                     m.numel_of(stage), " elements");
            part = cf.tp_part;
            stage = cf.pp_stage;
            next = 0;
        }
        const int64_t arena = m.numel_of(stage);
        ZT_CHECK(cf.lo == next && cf.hi >= cf.lo && cf.hi <= arena, where, ": file \"", cf.file,
                 "\" holds [", cf.lo, ", ", cf.hi, "), but the next range starts at ", next,
                 " and the arena has ", arena, " elements");
        next = cf.hi;
        cf.bytes = r.unsigned_integer(f, "bytes", uint64_t{1} << 60);
        cf.crc32c = static_cast<uint32_t>(r.unsigned_integer(f, "crc32c", 0xffffffffu));
        m.files.push_back(std::move(cf));
    }
    ZT_CHECK(next == m.numel_of(stage) && part == m.tp - 1 && stage == m.pp - 1, where,
             ": the files cover [0, ", next, ") of ", m.numel_of(stage), " elements of tp part ",
             part, " of ", m.tp, " of pp stage ", stage, " of ", m.pp);
    if (j.contains("trainer")) {
        ZT_CHECK(j["trainer"].is_object(), where, ": \"trainer\" is not an object");
        m.trainer = j["trainer"];
    }
    return m;
}

Manifest read_manifest(const std::string& dir) {
    const std::string path = dir + "/manifest.json";
    std::ifstream f(path, std::ios::binary);
    ZT_CHECK(f.good(), "checkpoint ", dir, ": no manifest.json (an incomplete checkpoint?)");
    std::stringstream ss;
    ss << f.rdbuf();
    Manifest m = parse_manifest(open_manifest_text(ss.str(), path), path);
    // The directory's name is part of what a checkpoint says: a manifest of another step under
    // this name (a renamed or damaged checkpoint) would resume at a step it does not hold.
    static const std::regex kStepDir("step_([0-9]{8,})");
    std::smatch sm;
    const std::string name = std::filesystem::path(dir).filename().string();
    if (std::regex_match(name, sm, kStepDir))
        ZT_CHECK(std::stoll(sm[1].str()) == m.step, path, ": the manifest says step ", m.step,
                 ", its directory name says step ", std::stoll(sm[1].str()),
                 " (a renamed or damaged checkpoint)");
    return m;
}

void write_manifest(const std::string& dir, const Manifest& m) {
    write_file_atomic(dir + "/manifest.json", seal_manifest_text(manifest_to_json(m)));
}

}  // namespace zt
