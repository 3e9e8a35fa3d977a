#include "runtime/checkpointer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <tuple>

#include "checkpoint/durable_file.h"
#include "checkpoint/sealed_text.h"
#include "checkpoint/shards.h"
#include "checkpoint/sparse_file.h"
#include "comm/gather_strings.h"
#include "compression/masked_optimizer.h"
#include "runtime/checkpoint_chain.h"
#include "runtime/checkpoint_read.h"
#include "runtime/comm_state_checkpoint.h"
#include "runtime/fault_injection.h"
#include "util/log.h"
#include "util/timer.h"

// Note [Checkpoint visibility]
// A checkpoint directory is visible under its final name only when complete: rank 0 creates
// step_N.partial, every rank writes and fsyncs its shard there, rank 0 writes manifest.json (with
// every shard's size and CRC-32C) and renames the directory to step_N, then rewrites `latest`
// (each through a temporary name, fsync and rename). A crash at any point leaves either the
// previous checkpoint as `latest`, or a .partial directory that resume never reads and the next
// checkpoint of that step removes. Resume skips a checkpoint that any rank cannot verify and falls
// back to the next older one.

namespace zt {

namespace fs = std::filesystem;

namespace {

// The ranks' int64 values in rank order (just `mine` without a communicator).
std::vector<int64_t> gather_i64(Communicator* comm, const std::vector<int64_t>& mine) {
    if (!comm || comm->size() == 1) return mine;
    std::vector<int64_t> all(mine.size() * static_cast<size_t>(comm->size()));
    comm->all_gather(mine.data(), all.data(),
                     std::vector<int64_t>(static_cast<size_t>(comm->size()),
                                          static_cast<int64_t>(mine.size())),
                     CommType::kI64)
        ->wait();
    return all;
}

std::string failed_ranks(const std::vector<int64_t>& flags) {
    std::string s;
    for (size_t r = 0; r < flags.size(); ++r)
        if (flags[r] == 0) s += str_cat(s.empty() ? "" : ", ", r);
    return s;
}

bool all_set(const std::vector<int64_t>& flags) {
    return std::all_of(flags.begin(), flags.end(), [](int64_t f) { return f != 0; });
}

// Rank 0's string on every rank.
std::string broadcast_string(Communicator* comm, std::string s, int root = 0) {
    if (!comm || comm->size() == 1) return s;
    int64_t n = static_cast<int64_t>(s.size());
    comm->broadcast(&n, 1, CommType::kI64, root)->wait();
    s.resize(static_cast<size_t>(n));
    comm->broadcast(s.data(), n, CommType::kU8, root)->wait();
    return s;
}

// This rank's share of a checkpoint: its owned range of the arena, without the padding.
Range shard_range(Engine& e) {
    ZeroDataParallel& dp = e.data_parallel();
    const Range own = owned_range(e.arena().padded_numel(), dp.ranks(), dp.rank());
    return intersect(own, {0, e.arena().numel()});
}

// The names and this rank's data of every tensor a shard holds, over shard_range(): the master
// weights and optimizer state in place where their tier is memory, else read from the tier into
// `copies` (which must outlive the pointers).
void shard_tensors(Engine& e, std::vector<std::string>* names, std::vector<const float*>* data,
                   std::vector<std::vector<float>>* copies) {
    const Range r = shard_range(e);
    const Range u = e.data_parallel().update_range();
    UpdateState& st = e.update_state();
    const std::vector<std::string> all = st.names();
    for (size_t i = 0; i < all.size(); ++i) {
        const int which = static_cast<int>(i);
        names->push_back(all[i]);
        if (const float* v = st.view(which)) {
            data->push_back(v + (r.lo - u.lo));
            continue;
        }
        copies->emplace_back(static_cast<size_t>(r.size()));
        st.read(which, r.lo - u.lo, r.size(), copies->back().data());
        data->push_back(copies->back().data());
    }
}

// Pipeline parallelism: every stage's parameters and arena length, gathered over the pipeline
// group (collective), each parameter marked with its stage.
void add_stage_params(Communicator& pp, Manifest& m) {
    nlohmann::json mine = nlohmann::json::array();
    for (const CheckpointParam& p : m.params)
        mine.push_back({p.name, p.shape, p.offset, p.split_dim, p.split_blocks});
    const std::vector<std::string> all =
        all_gather_strings(pp, nlohmann::json{{"numel", m.numel}, {"params", mine}}.dump());
    m.params.clear();
    for (size_t s = 0; s < all.size(); ++s) {
        const nlohmann::json j = nlohmann::json::parse(all[s]);
        m.stage_numel.push_back(j["numel"].get<int64_t>());
        for (const nlohmann::json& p : j["params"]) {
            CheckpointParam cp{p[0].get<std::string>(), p[1].get<std::vector<int64_t>>(),
                               p[2].get<int64_t>(),     p[3].get<int>(),
                               p[4].get<int64_t>(),     static_cast<int>(s)};
            m.params.push_back(std::move(cp));
        }
    }
    m.numel = m.stage_numel[0];
}

Manifest manifest_of(Engine& e) {
    Manifest m;
    const EngineCounters c = e.counters();
    m.step = c.steps_done;
    m.updates = c.updates_done;
    ZeroDataParallel& dp = e.data_parallel();
    const TensorParallel& tp = e.options().tp;
    m.dp = dp.ranks();
    m.tp = tp.size();
    m.pp = e.options().pp ? e.options().pp->size() : 1;
    m.ranks = m.dp * m.tp * m.pp;
    m.zero_stage = dp.stage();
    m.compute_dtype = dtype_name(e.arena().options().compute_dtype);
    m.grad_dtype = dtype_name(e.arena().options().grad_dtype);
    m.numel = e.arena().numel();
    for (Parameter* p : e.arena().params()) {
        m.params.push_back({p->name, p->global_shape(), p->offset});
        if (p->split.sharded()) {
            m.params.back().split_dim = p->split.dim;
            m.params.back().split_blocks = p->split.blocks;
        }
    }
    if (m.pp > 1) add_stage_params(*e.options().pp, m);
    m.optimizer = e.optimizer().name();
    m.tensors = e.update_state().names();  // "master", then the optimizer's state
    // Derived state, recorded for `checkpoint inspect`: the data cursor is the step (sample k of
    // a step is a function of it) and the learning-rate schedule a function of the updates.
    if (SparseParams* sp = e.sparse_params())  // files are added once written (complete())
        m.trainer["sparse"] = {{"tensors", sp->names()},
                               {"optimizer", sp->optimizer_name()},
                               {"layout", sparse_layout(*sp)},
                               {"files", nlohmann::json::array()}};
    // compression.pruning "rows": the lookups per row so far, summed over ranks (the same on
    // every rank and layout, so they reshard as they are).
    if (const Pruner* pr = e.pruner(); pr != nullptr && pr->counts_rows())
        m.trainer["pruning_row_counts"] = pr->row_counts();
    m.trainer["data"] = {{"next_step", c.steps_done}};
    m.trainer["scheduler"] = {{"updates", c.updates_done}};
    if (c.has_scaler)
        m.trainer["loss_scaler"] = {{"scale", c.scaler.scale},
                                    {"cur_iter", c.scaler.cur_iter},
                                    {"last_overflow_iter", c.scaler.last_overflow_iter},
                                    {"cur_hysteresis", c.scaler.cur_hysteresis}};
    return m;
}

// Throws kInput naming what differs when the checkpoint is not of the engine's model.
void check_same_model(const Manifest& m, Engine& e, const std::string& where) {
    check_checkpoint_params(m, e.arena().params(), where, e.options().pp != nullptr);
    ZT_CHECK(m.optimizer == e.optimizer().name(), where, " was written with optimizer ",
             m.optimizer, ", this run uses ", e.optimizer().name());
    for (const std::string& name : e.optimizer().state_names())  // a dense one starts pruning
        ZT_CHECK(name == kPrunedStateName ||
                     std::find(m.tensors.begin(), m.tensors.end(), name) != m.tensors.end(),
                 where, " holds no optimizer state \"", name, "\"");
}

// This rank's sparse blocks (nn/sparse_params.h), named by tensor: of the incremental tensors
// only what changed since the last checkpoint when `delta` (Note [Incremental checkpoints]).
// Copies, except the whole blocks of streamed tensors (tables on a tier, maybe larger than
// memory), which are listed as pieces (ranges, data empty) with their tensor in `streamed` (-1 for
// a copy) and read one at a time when the file is written (Note [Streamed sparse blocks]).
// bytes: what the incremental tensors' blocks hold, [0] dynamic (keyed) tables, [1] static
// (sharded) ones.
std::vector<NamedSparseBlock> sparse_blocks(Engine& e, bool delta, int64_t bytes[2],
                                            std::vector<int64_t>& streamed) {
    std::vector<NamedSparseBlock> out;
    SparseParams* sp = e.sparse_params();
    if (!sp) return out;
    const std::vector<std::string> names = sp->names();
    for (size_t i = 0; i < names.size(); ++i) {
        const bool inc = sp->incremental(i);
        if (sp->streamed(i) && !(inc && delta)) {
            for (SparseBlock& b : sp->pieces(i)) {
                if (inc) {  // the piece's weights and state (one value a row, or planes)
                    const int64_t cols = b.col_end - b.col_begin, sc = sp->state_cols(i);
                    const int64_t state =
                        sc == 1 ? 1 : sc * cols / std::max<int64_t>(sp->shape(i)[1], 1);
                    bytes[sp->keyed(i) ? 0 : 1] += (b.row_end - b.row_begin) * (cols + state) * 4;
                }
                out.push_back({names[i], std::move(b)});
                streamed.push_back(static_cast<int64_t>(i));
            }
            continue;
        }
        for (SparseBlock& b : (inc && delta) ? sp->delta_blocks(i) : sp->blocks(i)) {
            if (inc)
                bytes[sp->keyed(i) ? 0 : 1] +=
                    static_cast<int64_t>((b.weights.size() + b.state.size()) * sizeof(float) +
                                         b.aux.size() * sizeof(uint64_t));
            out.push_back({names[i], std::move(b)});
            streamed.push_back(-1);
        }
    }
    return out;
}

// Writes the sparse blocks of p-like fields to path, reading streamed pieces from sp.
SparseFileInfo write_sparse_blocks(const std::string& path, SparseParams* sp,
                                   std::vector<NamedSparseBlock>& blocks,
                                   const std::vector<int64_t>& streamed) {
    SparseBlock piece;  // the piece read last
    return write_sparse_file(path, blocks, [&](size_t k) -> const SparseBlock& {
        if (streamed[k] < 0) return blocks[k].block;
        piece = sp->read_piece(static_cast<size_t>(streamed[k]), blocks[k].block);
        return piece;
    });
}

bool has_incremental(Engine& e) {
    SparseParams* sp = e.sparse_params();
    if (!sp) return false;
    for (size_t i = 0; i < sp->names().size(); ++i)
        if (sp->incremental(i)) return true;
    return false;
}

// A checkpoint's identity in chains (Note [Incremental checkpoints]): random, not a function of
// the step, so that a rerun's checkpoint of the same step is told apart.
int64_t random_uid() {
    std::random_device rd;
    return static_cast<int64_t>((static_cast<uint64_t>(rd()) << 32) ^ rd());
}

const std::regex kStepDir("step_([0-9]{8,})");

}  // namespace

std::string checkpoint_name(int64_t step) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
    return buf;
}

std::vector<std::string> checkpoint_candidates(const std::string& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return out;
    std::vector<std::pair<int64_t, std::string>> found;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        std::smatch sm;
        const std::string name = entry.path().filename().string();
        if (entry.is_directory(ec) && std::regex_match(name, sm, kStepDir))
            found.emplace_back(std::stoll(sm[1].str()), name);
    }
    std::sort(found.begin(), found.end(), std::greater<>());
    // `latest` is trusted only when its checksum holds (checkpoint/sealed_text.h); otherwise the
    // newest checkpoint by its step comes first, and each is verified in full before use.
    std::ifstream latest(dir + "/latest", std::ios::binary);
    std::string named;
    if (latest) {
        const std::string text((std::istreambuf_iterator<char>(latest)),
                               std::istreambuf_iterator<char>());
        std::string why;
        if (std::optional<std::string> n = open_latest_text(text, &why))
            named = *n;
        else
            log_warn("checkpoints: ignoring ", dir, "/latest: ", why,
                     "; taking the newest checkpoint by its step");
    }
    if (!named.empty() && fs::is_directory(dir + "/" + named)) out.push_back(dir + "/" + named);
    for (const auto& [step, name] : found)
        if (name != named) out.push_back(dir + "/" + name);
    return out;
}

struct Checkpointer::Pending {
    Manifest manifest;
    std::string partial, final;
    Range range;
    std::vector<std::string> names;
    std::vector<const float*> data;
    std::vector<std::vector<float>> copies;  // tensors read from an offload tier
    std::thread thread;
    std::atomic<bool> done{false};
    CheckpointFile file;
    std::vector<NamedSparseBlock> sparse;  // copies of this rank's sparse blocks, or pieces
    std::vector<int64_t> streamed;         // per block: a piece's tensor, -1 for a copy
    bool sparse_written = false;           // pieces are written by save() itself
    SparseFileInfo sparse_file;
    std::map<std::string, std::string> state_files;  // rank 0's (checkpoint_state_files.h)
    bool delta = false;                              // the incremental tensors' blocks are deltas
    int64_t incremental_bytes[2] = {0, 0};           // this rank's bytes of them: dynamic, static
    ChainLink link;                                  // this checkpoint's (rank 0's uid)
    CommStateCopy comm_state;  // error-feedback residuals (comm_state_checkpoint.h)
    std::string error;         // this rank's write failed
};

Checkpointer::Checkpointer(Engine& engine, Communicator* comm, CheckpointOptions options)
    : engine_(engine), comm_(comm), options_(std::move(options)) {
    incremental_ = options_.full_every > 0 && has_incremental(engine_);
    if (incremental_) engine_.sparse_params()->track_changes(true);
    // Asynchronous checkpoints copy into staging buffers that live as long as the Checkpointer.
    // Allocated and faulted in here, at the start of the run, they cost the first checkpoint no
    // more than the others: allocated by it, they stalled it 0.9-10 s for a 1.5 GB shard on this
    // project's virtual machine (page faults the host serves slowly), against 0.1 s for a copy.
    if (options_.async && options_.interval_steps > 0) {
        staging_.resize(engine_.update_state().names().size());
        for (auto& s : staging_) s.resize(static_cast<size_t>(shard_range(engine_).size()));
    }
}

Checkpointer::~Checkpointer() {
    if (pending_ && pending_->thread.joinable()) pending_->thread.join();
}

void Checkpointer::save() {
    Stopwatch sw;
    finish();
    const bool root = !comm_ || comm_->rank() == 0;
    auto p = std::make_unique<Pending>();
    p->manifest = manifest_of(engine_);
    p->final = options_.dir + "/" + checkpoint_name(p->manifest.step);
    p->partial = p->final + ".partial";
    // Rank 0 makes the directory; every rank learns whether it could.
    std::string prep_error;
    if (root) try {
            fs::create_directories(options_.dir);
            fs::remove_all(p->partial);
            fs::create_directories(p->partial);
        } catch (const std::exception& e) {
            prep_error = e.what();
        }
    // Rank 0's flag and uid (the checkpoint's identity in chains) on every rank.
    const std::vector<int64_t> ok = gather_i64(comm_, {prep_error.empty() ? 1 : 0, random_uid()});
    if (ok[0] == 0) {
        const std::string msg = str_cat("checkpoint at step ", p->manifest.step, ": cannot create ",
                                        p->partial, prep_error.empty() ? "" : ": " + prep_error);
        if (options_.stop_on_error)
            throw Error(ErrorKind::kInternal, __FILE__, __LINE__,
                        msg + " (checkpoint.on_error \"stop\"; the previous checkpoint is intact)");
        if (root) log_warn(msg, "; training goes on (checkpoint.on_error \"continue\")");
        return;
    }
    p->range = shard_range(engine_);
    shard_tensors(engine_, &p->names, &p->data, &p->copies);
    p->delta = incremental_ && !force_full_ && !chain_.empty() &&
               static_cast<int64_t>(chain_.size()) < options_.full_every;
    p->sparse = sparse_blocks(engine_, p->delta, p->incremental_bytes, p->streamed);
    if (SparseParams* sp = engine_.sparse_params()) {
        sp->saved();  // changes from here go to the next checkpoint
        char buf[20];
        std::snprintf(buf, sizeof buf, "%016llx",
                      static_cast<unsigned long long>(ok[1]));  // rank 0's
        p->link = {checkpoint_name(p->manifest.step), buf};
        nlohmann::json& js = p->manifest.trainer["sparse"];
        js["uid"] = p->link.uid;
        if (p->delta) {
            nlohmann::json chain = nlohmann::json::array(), tensors = nlohmann::json::array();
            for (const ChainLink& l : chain_) chain.push_back({{"name", l.name}, {"uid", l.uid}});
            const std::vector<std::string> names = sp->names();
            for (size_t i = 0; i < names.size(); ++i)
                if (sp->incremental(i)) tensors.push_back(names[i]);
            js["delta"] = {{"tensors", tensors}, {"chain", chain}};
        }
    }
    p->comm_state = copy_comm_state(engine_);
    if (root) p->state_files = stage_state_files(state_sources_, p->manifest);
    const int rank = comm_ ? comm_->rank() : 0;
    // Pieces are read from the tables as they are now, so they are written here, before training
    // goes on, whether the checkpoint is asynchronous or not (Note [Streamed sparse blocks]).
    if (std::any_of(p->streamed.begin(), p->streamed.end(), [](int64_t t) { return t >= 0; })) {
        try {
            p->sparse_file = write_sparse_blocks(p->partial + "/" + sparse_file_name(rank),
                                                 engine_.sparse_params(), p->sparse, p->streamed);
        } catch (const std::exception& e) {
            p->error = e.what();
        }
        std::vector<NamedSparseBlock>().swap(p->sparse);
        p->sparse_written = true;
    }
    auto write = [pp = p.get(), rank, io = options_.io] {
        if (!pp->error.empty()) {
            pp->done = true;
            return;
        }
        try {
            fault_in_checkpoint_write(rank, pp->manifest.step,
                                      pp->partial + "/" + shard_file_name(rank));  // ZT_FAULT
            pp->file =
                write_shard(pp->partial, rank, pp->range.lo, pp->range.hi, pp->names, pp->data, io);
            if (!pp->sparse.empty() && !pp->sparse_written)
                pp->sparse_file =
                    write_sparse_file(pp->partial + "/" + sparse_file_name(rank), pp->sparse);
            std::vector<NamedSparseBlock>().swap(pp->sparse);
            write_comm_state(pp->partial, rank, pp->comm_state);
            pp->comm_state = {};
            write_state_files(pp->partial, pp->state_files);
        } catch (const std::exception& e) {
            pp->error = e.what();
        }
        pp->done = true;
    };
    if (options_.async) {  // stage copies, so training may change the state meanwhile
        // The staging buffers live as long as the Checkpointer: allocated (and faulted in) once,
        // reused by every later checkpoint, since the previous write has finished by now.
        const size_t n = static_cast<size_t>(p->range.size());
        staging_.resize(p->data.size());
        for (size_t i = 0; i < p->data.size(); ++i) {
            staging_[i].resize(n);
            std::copy(p->data[i], p->data[i] + n, staging_[i].data());
            p->data[i] = staging_[i].data();
        }
        pending_ = std::move(p);
        pending_->thread = std::thread(write);
    } else {
        write();
        pending_ = std::move(p);
        complete(true);
    }
    stall_s_ = sw.elapsed_s();
}

void Checkpointer::poll() {
    if (pending_) complete(false);
}

void Checkpointer::finish() {
    if (pending_) complete(true);
}

void Checkpointer::complete(bool wait) {
    Pending& p = *pending_;
    if (!wait && !all_set(gather_i64(comm_, {p.done ? 1 : 0}))) return;
    if (p.thread.joinable()) p.thread.join();
    const bool root = !comm_ || comm_->rank() == 0;
    const int64_t step = p.manifest.step;
    // Every rank's shard: ok, range, size, CRC.
    constexpr size_t kInfo = 11;
    const std::vector<int64_t> info = gather_i64(
        comm_, {p.error.empty() ? 1 : 0, p.file.lo, p.file.hi, static_cast<int64_t>(p.file.bytes),
                static_cast<int64_t>(p.file.crc32c), static_cast<int64_t>(p.sparse_file.bytes),
                static_cast<int64_t>(p.sparse_file.header_crc32c), engine_.options().tp.rank(),
                engine_.options().pp ? engine_.options().pp->rank() : 0, p.incremental_bytes[0],
                p.incremental_bytes[1]});
    const size_t ranks = info.size() / kInfo;
    std::vector<int64_t> written(ranks);
    for (size_t r = 0; r < ranks; ++r) written[r] = info[kInfo * r];
    int64_t dynamic_bytes = 0, static_bytes = 0;  // over the ranks
    for (size_t r = 0; r < ranks; ++r) {
        dynamic_bytes += info[kInfo * r + 9];
        static_bytes += info[kInfo * r + 10];
    }
    if (incremental_)
        p.manifest.trainer["sparse"]["incremental_bytes"] = {
            {"kind", p.delta ? "incremental" : "full"},
            {"bytes", dynamic_bytes + static_bytes},
            {"dynamic", dynamic_bytes},
            {"static", static_bytes}};
    std::string error;
    if (!p.error.empty())
        error = p.error;
    else if (!all_set(written))
        error = str_cat("the write failed on rank(s) ", failed_ranks(written));
    if (root) try {
            if (error.empty()) {
                for (size_t r = 0; r < ranks; ++r) {
                    const int64_t* f = &info[kInfo * r];
                    p.manifest.files.push_back(
                        {shard_file_name(static_cast<int>(r)), static_cast<int>(r), f[1], f[2],
                         static_cast<uint64_t>(f[3]), static_cast<uint32_t>(f[4]),
                         static_cast<int>(f[7]), static_cast<int>(f[8])});
                    if (f[5] > 0)
                        p.manifest.trainer["sparse"]["files"].push_back(
                            {{"file", sparse_file_name(static_cast<int>(r))},
                             {"bytes", f[5]},
                             {"header_crc32c", f[6]}});
                }
                // Ordered by pipeline stage, tensor-parallel part, then range (ranks interleave
                // the parts).
                std::stable_sort(p.manifest.files.begin(), p.manifest.files.end(),
                                 [](const CheckpointFile& a, const CheckpointFile& b) {
                                     return std::tuple(a.pp_stage, a.tp_part, a.lo) <
                                            std::tuple(b.pp_stage, b.tp_part, b.lo);
                                 });
                write_manifest(p.partial, p.manifest);
                fs::remove_all(p.final);  // an older checkpoint of the same step (a rerun)
                rename_durable(p.partial, p.final);
                write_file_atomic(options_.dir + "/latest",
                                  seal_latest_text(checkpoint_name(step)));
                if (options_.keep_last > 0) {  // prune the oldest complete ones no kept one needs
                    std::vector<std::string> all = checkpoint_candidates(options_.dir);
                    std::sort(all.begin(), all.end(), std::greater<>());
                    const auto keep = std::min(all.size(), static_cast<size_t>(options_.keep_last));
                    const std::set<std::string> bases =
                        chain_bases(std::vector<std::string>(all.begin(), all.begin() + keep));
                    for (size_t i = keep; i < all.size(); ++i)
                        if (!bases.count(fs::path(all[i]).filename().string()))
                            fs::remove_all(all[i]);
                }
            } else {
                std::error_code ec;
                fs::remove_all(p.partial, ec);
            }
        } catch (const std::exception& e) {
            if (error.empty()) error = e.what();
        }
    // Rank 0's outcome, so that every rank stops, or goes on, together.
    const std::vector<int64_t> root_ok = gather_i64(comm_, {error.empty() ? 1 : 0});
    const bool delta = p.delta;
    const ChainLink link = p.link;
    pending_.reset();
    if (root_ok[0] != 0 && error.empty()) {
        last_visible_ = step;
        if (incremental_) {
            if (!delta) chain_.clear();
            chain_.push_back(link);
            force_full_ = false;
            report_ = {{"step", step},
                       {"kind", delta ? "incremental" : "full"},
                       {"dynamic_bytes", dynamic_bytes},
                       {"static_bytes", static_bytes}};
        }
        return;
    }
    force_full_ = true;  // its changes were marked as saved: the next checkpoint is whole
    if (error.empty()) error = "rank 0 could not finish it";
    const std::string msg = str_cat("checkpoint at step ", step, " failed: ", error);
    if (options_.stop_on_error)
        throw Error(ErrorKind::kInternal, __FILE__, __LINE__,
                    msg + " (checkpoint.on_error \"stop\"; the previous checkpoint is intact)");
    if (root) log_warn(msg, "; training goes on (checkpoint.on_error \"continue\")");
}

void Checkpointer::resumed(const Manifest& m) {
    chain_.clear();
    if (!incremental_) return;
    // Another rank count or placement merged the blocks: the next checkpoint starts a chain of
    // its own (an increment's blocks pair with whole blocks of the same writers).
    const ZeroDataParallel& dp = engine_.data_parallel();
    const int ranks = comm_ ? comm_->size() : 1;
    if (m.ranks != ranks || m.dp != dp.ranks() || chain_link(m).uid.empty()) return;
    if (m.trainer.at("sparse").value("layout", std::string()) !=
        sparse_layout(*engine_.sparse_params()))
        return;
    chain_ = chain_of(m);
    chain_.push_back(chain_link(m));
}

std::optional<nlohmann::json> Checkpointer::take_report() {
    std::optional<nlohmann::json> r = std::move(report_);
    report_.reset();
    return r;
}

void load_sparse_blocks(Engine& engine, const Manifest& m, const std::string& dir) {
    for_each_sparse_block(engine, m, dir, [&](size_t tensor, SparseBlock& block) {
        engine.sparse_params()->load_block(tensor, block);
    });
}

std::optional<Manifest> resume_latest(Engine& engine, Communicator* comm, const std::string& dir,
                                      std::vector<std::string>* skipped,
                                      const DirectIoOptions& io) {
    const bool root = !comm || comm->rank() == 0;
    // Rank 0's list, so that every rank tries the same checkpoints in the same order.
    std::string list;
    for (const std::string& c : checkpoint_candidates(dir)) list += c + "\n";
    list = broadcast_string(comm, list);
    std::vector<std::string> candidates;
    for (size_t b = 0, e; (e = list.find('\n', b)) != std::string::npos; b = e + 1)
        candidates.push_back(list.substr(b, e - b));

    // The master weights and optimizer state of the update range, whatever tier holds them;
    // Engine::restore makes the compute weights (and any whole master) from them.
    UpdateState& st = engine.update_state();
    const std::vector<std::string> names = st.names();
    const Range upd = engine.data_parallel().update_range();
    for (const std::string& cand : candidates) {
        std::optional<Manifest> m;
        std::vector<std::vector<float>> state;  // per names()
        std::string error;
        try {
            m = read_manifest(cand);
            check_same_model(*m, engine, cand);
            state.reserve(names.size());
            std::vector<float*> outs;
            std::vector<std::string> held;  // a checkpoint without pruning's mask: none pruned
            for (size_t i = 0; i < names.size(); ++i) {
                state.emplace_back(static_cast<size_t>(upd.size()));
                if (std::find(m->tensors.begin(), m->tensors.end(), names[i]) == m->tensors.end())
                    continue;
                held.push_back(names[i]);
                outs.push_back(state.back().data());
            }
            // One pass over each shard for all tensors, from whatever layout wrote them.
            read_checkpoint_range(cand, *m, engine.arena().params(), upd.lo, upd.hi, held, outs, io,
                                  engine.options().pp != nullptr);
            // Every sparse block read and checked, and dropped: they are read again to be
            // loaded below, one at a time, once every rank can read the checkpoint (Note
            // [Tiered shards in pieces]: tables may be larger than memory).
            for_each_sparse_block(engine, *m, cand, [](size_t, SparseBlock&) {});
        } catch (const std::exception& e) {
            error = e.what();
        }
        const std::vector<int64_t> ok = gather_i64(comm, {error.empty() ? 1 : 0});
        if (!all_set(ok)) {
            // The first failing rank's reason, said on every rank (rank 0 may have read its
            // own part of the checkpoint fine), with the ranks that failed.
            int first = 0;
            while (ok[static_cast<size_t>(first)] != 0) ++first;
            const std::string why = str_cat(broadcast_string(comm, error, first),
                                            " (unreadable on rank(s) ", failed_ranks(ok), ")");
            if (root) log_warn("resume: skipping checkpoint ", cand, ": ", why);
            if (skipped) skipped->push_back(cand + ": " + why);
            continue;
        }
        for (size_t i = 0; i < names.size(); ++i)
            st.write(static_cast<int>(i), 0, upd.size(), state[i].data());
        if (engine.sparse_params()) try {
                load_sparse_blocks(engine, *m, cand);
            } catch (const Error& e) {  // it read fine a moment ago: the tables are half loaded
                throw Error(ErrorKind::kInternal, __FILE__, __LINE__,
                            str_cat("resume: ", cand,
                                    " failed while its embedding tables were "
                                    "loaded, after it had been checked: ",
                                    e.message(), " (the tables are partly loaded; resume again)"));
            }
        EngineCounters c = engine.counters();
        c.steps_done = m->step;
        c.updates_done = m->updates;
        if (c.has_scaler && m->trainer.contains("loss_scaler")) {
            const nlohmann::json& s = m->trainer["loss_scaler"];
            c.scaler.scale = s.value("scale", c.scaler.scale);
            c.scaler.cur_iter = s.value("cur_iter", c.scaler.cur_iter);
            c.scaler.last_overflow_iter =
                s.value("last_overflow_iter", c.scaler.last_overflow_iter);
            c.scaler.cur_hysteresis = s.value("cur_hysteresis", c.scaler.cur_hysteresis);
        } else {
            c.has_scaler = false;  // keep the fresh scaler
        }
        if (Pruner* pr = engine.pruner(); pr != nullptr && pr->counts_rows()) {
            ZT_CHECK(m->trainer.contains("pruning_row_counts"), "resume: ", cand,
                     " holds no row counts for compression.pruning \"rows\" (it was written "
                     "without it); start that run fresh or remove the pruning section");
            pr->set_row_counts(
                m->trainer["pruning_row_counts"].get<std::vector<std::vector<double>>>());
        }
        engine.restore(c);
        if (const std::string why = read_comm_state(cand, comm ? comm->rank() : 0, engine);
            !why.empty())
            log_warn(
                "resume: the error-feedback residuals of the compressed communication "
                "(compression.gradients, OneBitAdam) restart at zero: ",
                why);
        return m;
    }
    return std::nullopt;
}

}  // namespace zt
