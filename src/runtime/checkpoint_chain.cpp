#include "runtime/checkpoint_chain.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <tuple>

#include "checkpoint/sparse_file.h"
#include "runtime/engine.h"
#include "util/crc32c.h"

// Note [Incremental checkpoints]
// With checkpoint.incremental.full_every K, the sparse tensors that can (dynamic tables and
// sharded static ones, SparseParams::incremental; Note [Incremental table state] and Note
// [Sharded table increments]) write at a checkpoint only what changed since the previous one
// (delta_blocks), and every K-th checkpoint is full: the chain is a full checkpoint and up to K - 1
// increments. Everything else (the dense arena's shards, tables replicated in it) is whole in
// every checkpoint, so only the sparse files differ. A delta block has its writer's identity (the
// whole block's rows and columns), so it pairs with the whole block of the same writer. The
// manifest's trainer.sparse holds `uid` (a random id of this checkpoint) and, for an increment,
// `delta`: `tensors` (those written as deltas) and `chain` (the links it needs: the full
// checkpoint, then each increment up to the one before it, by name and uid). A reader reads the
// full checkpoint's blocks of those tensors, applies each increment's delta blocks of the same
// writer in order (SparseParams::apply_delta), then this checkpoint's, and hands the whole blocks
// to load_block as for a full checkpoint: the same rank count restores each rank's block as it was,
// another reshards it. Each link's manifest is read and sealed-checked, its uid must match (a rerun
// may have rewritten a step's checkpoint), its own chain must be the prefix before it, and it must
// have been written by the same ranks. The writer starts a new chain (a full checkpoint) after K,
// after a failed write (the changes were marked as saved when the failed one was staged), and after
// a resume on another rank count or placement (trainer.sparse.layout); it continues the resumed
// chain on the same one. Retention (keep_last) keeps every link a kept checkpoint needs.

namespace zt {

namespace fs = std::filesystem;

namespace {

const std::regex kLinkName("step_[0-9]{8,}");

const nlohmann::json* sparse_json(const Manifest& m) {
    auto it = m.trainer.find("sparse");
    return it == m.trainer.end() || !it->is_object() ? nullptr : &*it;
}

// A block of a checkpoint's sparse file, read on demand.
struct BlockRef {
    std::shared_ptr<const SparseFileReader> file;
    size_t block = 0;   // in the file's index
    size_t tensor = 0;  // SparseParams' index
    const SparseBlock& ranges() const { return file->index()[block].block; }
    SparseBlock read() const { return file->read(block).block; }
};

// The blocks of one checkpoint's sparse files that overlap this rank, optionally only those of
// `only` tensors (empty: all), after the checks that the tables are this run's. Reads headers
// only.
std::vector<BlockRef> index_files(Engine& e, const Manifest& m, const std::string& dir,
                                  const std::vector<bool>* only) {
    std::vector<BlockRef> out;
    SparseParams* sp = e.sparse_params();
    const bool has = m.trainer.contains("sparse");
    ZT_CHECK(has == (sp != nullptr), dir,
             sp ? " holds no sharded embedding tables, and this run "
                  "shards some"
                : " holds sharded embedding tables, and this run has "
                  "none (set the same embedding section)");
    if (!sp) return out;
    const nlohmann::json& js = m.trainer["sparse"];
    const std::vector<std::string> names = sp->names();
    ZT_CHECK(js.value("tensors", std::vector<std::string>{}) == names, dir,
             " shards other embedding tables than this run: ",
             js.value("tensors", nlohmann::json()).dump());
    ZT_CHECK(js.value("optimizer", std::string()) == sp->optimizer_name(), dir,
             " was written with embedding optimizer ", js.value("optimizer", std::string()),
             ", this run uses ", sp->optimizer_name());
    for (const nlohmann::json& f : js.at("files")) {
        auto reader = std::make_shared<const SparseFileReader>(
            dir + "/" + f.at("file").get<std::string>(),
            SparseFileInfo{f.at("bytes").get<uint64_t>(), f.at("header_crc32c").get<uint32_t>()});
        for (size_t b = 0; b < reader->index().size(); ++b) {
            const NamedSparseBlock& nb = reader->index()[b];
            const auto it = std::find(names.begin(), names.end(), nb.tensor);
            ZT_CHECK(it != names.end(), dir, ": a sparse block of unknown tensor ", nb.tensor);
            const auto i = static_cast<size_t>(it - names.begin());
            if (only && !(*only)[i]) continue;
            if (sp->overlaps(i, nb.block)) out.push_back({reader, b, i});
        }
    }
    return out;
}

using WriterKey = std::tuple<size_t, int64_t, int64_t, int64_t>;  // tensor, rows, cols' end

WriterKey writer_of(size_t i, const SparseBlock& b) {
    return {i, b.row_begin, b.row_end, b.col_end};
}

WriterKey writer_of(const BlockRef& r) { return writer_of(r.tensor, r.ranges()); }

// One link of dir's chain: its manifest, checked to be the checkpoint the chain was written on.
Manifest read_link(const std::string& dir, const Manifest& head,
                   const std::vector<ChainLink>& chain, size_t k) {
    const ChainLink& link = chain[k];
    ZT_CHECK(std::regex_match(link.name, kLinkName), dir, ": its chain names \"", link.name,
             "\", not a checkpoint directory");
    const std::string path = (fs::path(dir).parent_path() / link.name).string();
    ZT_CHECK(fs::is_directory(path), dir, " is an incremental checkpoint whose ",
             k == 0 ? "base (full) checkpoint " : "earlier increment ", link.name,
             " is missing from ", fs::path(dir).parent_path().string(),
             "; it cannot be resumed without it (resume falls back to an older checkpoint)");
    Manifest m;
    try {
        m = read_manifest(path);
    } catch (const Error& e) {
        ZT_CHECK(false, dir, " is an incremental checkpoint whose ",
                 k == 0 ? "base (full) checkpoint " : "earlier increment ", link.name,
                 " is damaged: ", e.message());
    }
    ZT_CHECK(chain_link(m).uid == link.uid, dir, " is an incremental checkpoint on ", link.name,
             " ", link.uid, ", but ", path, " is another checkpoint (", chain_link(m).uid,
             "), written over it since");
    const std::vector<ChainLink> own = chain_of(m);
    ZT_CHECK(own.size() == k && std::equal(own.begin(), own.end(), chain.begin()), dir,
             ": its chain's link ", link.name, " was written on another chain");
    ZT_CHECK(m.ranks == head.ranks && m.dp == head.dp, dir, ": its chain's link ", link.name,
             " was written by ", m.ranks, " ranks, this checkpoint by ", head.ranks);
    return m;
}

}  // namespace

ChainLink chain_link(const Manifest& m) {
    ChainLink l;
    char buf[32];
    std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(m.step));
    l.name = buf;
    if (const nlohmann::json* js = sparse_json(m)) l.uid = js->value("uid", std::string());
    return l;
}

std::vector<ChainLink> chain_of(const Manifest& m) {
    std::vector<ChainLink> out;
    const nlohmann::json* js = sparse_json(m);
    if (!js || !js->contains("delta")) return out;
    try {
        for (const nlohmann::json& l : js->at("delta").at("chain"))
            out.push_back({l.at("name").get<std::string>(), l.at("uid").get<std::string>()});
    } catch (const nlohmann::json::exception& e) {
        ZT_CHECK(false, "checkpoint of step ", m.step, ": a malformed chain: ", e.what());
    }
    ZT_CHECK(!out.empty(), "checkpoint of step ", m.step, ": an increment with an empty chain");
    return out;
}

std::string sparse_layout(const SparseParams& sp) {
    const std::string text = sp.plan_json().dump();
    char buf[12];
    std::snprintf(buf, sizeof buf, "%08x", crc32c(text.data(), text.size()));
    return buf;
}

std::set<std::string> chain_bases(const std::vector<std::string>& dirs) {
    std::set<std::string> out;
    for (const std::string& d : dirs) try {
            for (const ChainLink& l : chain_of(read_manifest(d))) out.insert(l.name);
        } catch (const std::exception&) {
        }
    return out;
}

// Blocks are read one at a time (with the increments of the same writer), so that tables larger
// than memory resume piece by piece (Note [Tiered shards in pieces]).
void for_each_sparse_block(Engine& e, const Manifest& m, const std::string& dir,
                           const std::function<void(size_t, SparseBlock&)>& fn) {
    const nlohmann::json* js = sparse_json(m);
    if (!js || !js->contains("delta") || !e.sparse_params()) {
        for (const BlockRef& r : index_files(e, m, dir, nullptr)) {
            SparseBlock b = r.read();
            ZT_CHECK(!e.sparse_params()->is_delta(r.tensor, b), dir,
                     ": a delta block in a checkpoint that names no chain");
            fn(r.tensor, b);
        }
        return;
    }
    SparseParams& sp = *e.sparse_params();
    const std::vector<std::string> names = sp.names();
    std::vector<bool> delta(names.size(), false);
    for (const std::string& t : js->at("delta").value("tensors", std::vector<std::string>{})) {
        const auto it = std::find(names.begin(), names.end(), t);
        ZT_CHECK(it != names.end(), dir, ": a delta of unknown tensor ", t);
        delta[static_cast<size_t>(it - names.begin())] = true;
    }
    // Per writer: its whole block in the chain's full checkpoint, then its deltas in order.
    struct Writer {
        BlockRef base;
        std::string base_dir;
        std::vector<std::pair<BlockRef, std::string>> deltas;
    };
    std::map<WriterKey, Writer> writers;
    const std::vector<ChainLink> chain = chain_of(m);
    auto add_deltas = [&](const std::vector<BlockRef>& refs, const std::string& where) {
        for (const BlockRef& r : refs) {
            const auto it = writers.find(writer_of(r));
            ZT_CHECK(it != writers.end(), where, ": a delta block of ", names[r.tensor], " (rank ",
                     r.ranges().row_begin, " of ", r.ranges().col_end,
                     ") whose base block is missing");
            it->second.deltas.emplace_back(r, where);
        }
    };
    for (size_t k = 0; k < chain.size(); ++k) {
        const Manifest link = read_link(dir, m, chain, k);
        const std::string path = (fs::path(dir).parent_path() / chain[k].name).string();
        const std::vector<BlockRef> refs = index_files(e, link, path, &delta);
        if (k == 0)
            for (const BlockRef& r : refs) writers[writer_of(r)] = {r, path, {}};
        else
            add_deltas(refs, path);
    }
    std::vector<BlockRef> head = index_files(e, m, dir, nullptr), head_deltas;
    for (const BlockRef& r : head) {
        if (delta[r.tensor]) {
            head_deltas.push_back(r);
            continue;
        }
        SparseBlock b = r.read();
        ZT_CHECK(!sp.is_delta(r.tensor, b), dir, ": a delta block of ", names[r.tensor],
                 " where the chain needs a whole one");
        fn(r.tensor, b);
    }
    add_deltas(head_deltas, dir);
    for (auto& [key, w] : writers) {
        const size_t i = std::get<0>(key);
        SparseBlock b = w.base.read();
        ZT_CHECK(!sp.is_delta(i, b), w.base_dir, ": a delta block of ", names[i],
                 " where the chain needs a whole one");
        for (const auto& [r, where] : w.deltas) {
            const SparseBlock d = r.read();
            ZT_CHECK(sp.is_delta(i, d), where, ": a whole block of ", names[i],
                     " where the chain needs a delta one");
            sp.apply_delta(i, b, d);
        }
        fn(i, b);
    }
}

}  // namespace zt
