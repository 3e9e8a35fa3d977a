#include "runtime/trainer.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <thread>

#include "checkpoint/durable_file.h"
#include "data/tokens/token_dataset.h"
#include "optim/onebit_adam.h"
#include "parallel/tensor_parallel_weights.h"
#include "runtime/batch_shares.h"
#include "runtime/budget_check.h"
#include "runtime/checkpointer.h"
#include "runtime/comm_compression_metrics.h"
#include "runtime/evaluation.h"
#include "runtime/fault_injection.h"
#include "runtime/memory_timeline.h"
#include "runtime/metrics.h"
#include "runtime/monitor/mfu_ceilings.h"
#include "runtime/monitor/monitor.h"
#include "runtime/offload_metrics.h"
#include "runtime/pipeline_step.h"
#include "runtime/plan_check.h"
#include "runtime/profiler/run_profilers.h"
#include "runtime/progress.h"
#include "runtime/progressive_validation.h"
#include "runtime/qat_metrics.h"
#include "runtime/run_dir_lock.h"
#include "runtime/run_estimate.h"
#include "runtime/run_mesh.h"
#include "runtime/run_weights.h"
#include "runtime/start_agreement.h"
#include "runtime/stream_steps.h"
#include "runtime/wall_clock_breakdown.h"
#include "tensor/gemm.h"
#include "tensor/gemm_machine.h"
#include "tensor/threads.h"
#include "util/log.h"
#include "util/signal_handler.h"
#include "util/timer.h"
#include "util/units.h"

namespace zt {

std::unique_ptr<Model> build_model(const TrainConfig& cfg) {
    ZT_ASSERT(cfg.model, "build_model: a config without a model family");
    return cfg.model->build();
}

namespace {

constexpr char kProgressiveFile[] = "progressive_window.bin";  // in each checkpoint of a stream

// Threads per rank when the config leaves it open: the cores shared by the ranks on this machine.
int default_threads(Communicator* comm) {
    if (!comm || comm->size() == 1) return 0;  // all cores
    int local = comm->size();
    if (comm->backend() == "mpi")
        for (const char* var :
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
            if (const char* v = std::getenv(var); v && std::atoi(v) > 0) {
                local = std::atoi(v);
                break;
            }
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, cores / local);
}

volatile std::sig_atomic_t g_stop_requested = 0;

// The first signal asks for a checkpoint and a clean stop; a second one acts as usual (kills).
extern "C" void on_stop_signal(int sig) {
    g_stop_requested = 1;
    std::signal(sig, SIG_DFL);
}

// Note [Preemption grace]: after a stop signal the run finishes its step and writes a checkpoint;
// when that takes longer than checkpoint.preempt_grace_s, this timer ends the process (exit code
// 143, as for SIGTERM) before the scheduler's SIGKILL would, leaving the previous checkpoint as
// the one to resume from (an unfinished one stays a .partial directory that resume ignores).
class GraceTimer {
  public:
    explicit GraceTimer(double grace_s) {
        if (grace_s <= 0) return;
        thread_ = std::thread([this, grace_s] {
            std::unique_lock lock(mu_);
            while (!done_ && g_stop_requested == 0)
                cv_.wait_for(lock, std::chrono::milliseconds(20));
            if (done_) return;
            if (cv_.wait_for(lock, std::chrono::duration<double>(grace_s), [&] { return done_; }))
                return;
            log_warn("stop signal: no checkpoint within checkpoint.preempt_grace_s = ", grace_s,
                     " s; exiting without one (resume continues from the previous checkpoint)");
            std::_Exit(143);
        });
    }
    ~GraceTimer() {
        if (!thread_.joinable()) return;
        {
            std::lock_guard lock(mu_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    GraceTimer(const GraceTimer&) = delete;
    GraceTimer& operator=(const GraceTimer&) = delete;

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

nlohmann::json comm_json(const CommStats& s) {
    nlohmann::json j = nlohmann::json::object();
    for (int k = 0; k < kCollectiveKindCount; ++k)
        if (s.count[k] > 0)
            j[collective_kind_name(static_cast<CollectiveKind>(k))] = {
                {"count", s.count[k]}, {"bytes", s.bytes_sent[k]}, {"seconds", s.seconds[k]}};
    return j;
}

CommStats stats_delta(const CommStats& now, const CommStats& before) {
    CommStats d;
    for (int k = 0; k < kCollectiveKindCount; ++k) {
        d.count[k] = now.count[k] - before.count[k];
        d.bytes_sent[k] = now.bytes_sent[k] - before.bytes_sent[k];
        d.seconds[k] = now.seconds[k] - before.seconds[k];
    }
    d.busy_s = now.busy_s - before.busy_s;
    return d;
}

// Note [Failed runs]: a failed run leaves nothing that looks like a finished one. Weights are
// written only after the last step (atomically, by the safetensors writer), and a stale
// model.safetensors of an earlier run in the same directory is removed when this run starts.
// After a failure metrics.jsonl keeps its lines (a log) and ends with {"error": message, "step":
// steps completed}; a failure before the first step removes the directory instead when this run
// created it (metrics.jsonl and config.json are then its only files; a memory timeline written
// inside stays). Either way a file this run created that is still empty (a disk full from the
// start: every write to it failed) is removed.
class RunDirectory {
  public:
    // `created`: this run made the directory (its lock did, run_dir_lock.h).
    RunDirectory(const std::string& path, bool created) : path_(path), created_(created) {
        std::filesystem::create_directories(path);
        std::filesystem::remove(path + "/model.safetensors");
        for (const char* f : kRunFiles) fresh_.push_back(!std::filesystem::exists(path + "/" + f));
    }
    // Never throws: the error being handled is the one to report.
    void fail(MetricsWriter* metrics, int64_t steps, const std::string& message) noexcept {
        try {
            if (steps == 0 && created_) {
                std::error_code ec;
                std::filesystem::remove(path_ + "/metrics.jsonl", ec);
                std::filesystem::remove(path_ + "/config.json", ec);
                std::filesystem::remove(path_, ec);  // only when empty
                return;
            }
            if (metrics) metrics->write({{"error", message}, {"step", steps}});
        } catch (...) {
        }
        std::error_code ec;
        for (size_t i = 0; i < fresh_.size(); ++i) {
            const std::string p = path_ + "/" + kRunFiles[i];
            if (fresh_[i] && std::filesystem::file_size(p, ec) == 0 && !ec)
                std::filesystem::remove(p, ec);
        }
    }

  private:
    static constexpr const char* kRunFiles[] = {"metrics.jsonl", "config.json"};
    std::string path_;
    bool created_;
    std::vector<bool> fresh_;  // per kRunFiles: absent before this run
};

// One file per rank: FILE for one process, FILE.rankR for each rank of several.
std::unique_ptr<MemoryTimeline> open_timeline(const std::string& path, int rank, int ranks) {
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    return std::make_unique<MemoryTimeline>(ranks == 1 ? path : str_cat(path, ".rank", rank), rank);
}

// The out-of-memory advice, made concrete with this run's settings, and the planner's fastest
// layout under the budget (as the check before the first step quotes it). cfg outlives the pool.
OomAdvisor oom_advisor(const TrainConfig& cfg) {
    OomHints h{cfg.micro_batch, cfg.grad_accum, cfg.activation_checkpointing.policy, cfg.precision};
    return [h, &cfg](const MemoryStats& s, int64_t budget, int64_t request) {
        return oom_advice(s, budget, request, h) + plan_suggestion(cfg, budget) + "\n";
    };
}

}  // namespace

void agree_on_config(Communicator& comm, uint64_t digest, const std::string& error) {
    const int n = comm.size();
    // Per rank: parse status (1 ok, 0 failed) and the config digest (split in two halves, so it
    // travels exactly as i64).
    int64_t mine[3] = {error.empty() ? 1 : 0, static_cast<int64_t>(digest >> 32),
                       static_cast<int64_t>(digest & 0xffffffffu)};
    // Other ranks' entries start as "no answer" (status -1): a rank whose gather did not run (a
    // collective skipped by fault injection, standing for ranks out of step) says so, instead of
    // reading zeros as "every rank's config is invalid".
    std::vector<int64_t> all(3 * static_cast<size_t>(n), -1);
    std::copy(mine, mine + 3, all.data() + 3 * comm.rank());
    comm.all_gather(mine, all.data(), std::vector<int64_t>(static_cast<size_t>(n), 3),
                    CommType::kI64)
        ->wait();
    if (!error.empty()) throw Error(ErrorKind::kInput, __FILE__, __LINE__, error);
    std::string silent;
    for (int r = 0; r < n; ++r)
        if (all[3 * r] == -1) silent += str_cat(silent.empty() ? "" : ", ", r);
    if (!silent.empty())
        throw Error(ErrorKind::kInternal, __FILE__, __LINE__,
                    str_cat("the config agreement (the ranks' first collective) got no answer "
                            "from rank(s) ",
                            silent, ": the ranks' collectives are out of step"));
    std::string failed;
    for (int r = 0; r < n; ++r)
        if (all[3 * r] == 0) failed += str_cat(failed.empty() ? "" : ", ", r);
    ZT_CHECK(failed.empty(), "the config is invalid on rank(s) ", failed,
             " (their own error says why); every rank stops");
    std::string differ;
    for (int r = 1; r < n; ++r)
        if (all[3 * r + 1] != all[1] || all[3 * r + 2] != all[2])
            differ += str_cat(differ.empty() ? "" : ", ", r);
    ZT_CHECK(differ.empty(), "the config differs across ranks: rank(s) ", differ,
             " hold a different config than rank 0 (a different file, or --set given to some "
             "ranks only); every rank must train the same config");
}

std::string checkpoint_dir(const TrainConfig& cfg, const std::string& run_dir) {
    return cfg.checkpoint.dir.empty() ? run_dir + "/checkpoints" : cfg.checkpoint.dir;
}

void check_fresh_start(const TrainConfig& cfg, const TrainOptions& opts) {
    check_run_dir(opts.run_dir);  // a directory, not held by another job
    if (opts.resume != TrainOptions::Resume::kNo || opts.overwrite) return;
    const std::string dir = checkpoint_dir(cfg, opts.run_dir);
    const std::vector<std::string> found = checkpoint_candidates(dir);
    ZT_CHECK(found.empty(), dir, " holds checkpoints (the newest is ",
             found.empty() ? "" : found[0],
             "): continue that run with --resume (or --resume auto), or start over with "
             "--overwrite, which deletes them");
}

void install_preemption_handler() {
    set_signal_handler(SIGTERM, on_stop_signal);
    set_signal_handler(SIGINT, on_stop_signal);
}

namespace {
// ", dp 2 x tensor 2 x pipeline 2": the mesh of a run that splits the model; "" otherwise.
std::string mesh_words(const TrainConfig& cfg) {
    if (cfg.tp == 1 && !cfg.pipe.active()) return "";
    std::string s = str_cat(", dp ", cfg.dp);
    if (cfg.tp > 1) s += str_cat(" x tensor ", cfg.tp);
    if (cfg.pipe.active()) s += str_cat(" x pipeline ", cfg.pipe.stages);
    return s;
}
}  // namespace

TrainResult run_training(const TrainConfig& cfg, const TrainOptions& opts, Communicator* comm) {
    const int rank = comm ? comm->rank() : 0;
    const int ranks = comm ? comm->size() : 1;
    const bool root = rank == 0;
    ZT_ASSERT(ranks == cfg.dp * cfg.tp * cfg.pipe.stages, "run_training: ", ranks,
              " ranks for a config with dp = ", cfg.dp, ", tensor = ", cfg.tp,
              " and pipeline = ", cfg.pipe.stages);
    // The dp, tp and pp groups: data and ZeRO go over dp, the model's split over tp and pp.
    MeshOptions mo;
    mo.sequence_parallel = cfg.sequence_parallel;
    mo.hierarchical = cfg.comm.hierarchical;
    mo.hpz = static_cast<int>(cfg.zero.hpz_partition_size);
    const RunMesh mesh = split_run_mesh(comm, static_cast<int>(cfg.tp), cfg.pipe.stages, mo);
    const int dp_rank = mesh.coord.dp, dp_ranks = mesh.shape.dp;
    std::optional<RunDirLock> lock;  // rank 0's, for the whole run (one job per run directory)
    fault_at_start(rank, ranks);     // ZT_FAULT, for tests of the supervisor
    if (cfg.threads > 0)
        set_num_threads(cfg.threads);
    else if (int t = default_threads(comm); t > 0)
        set_num_threads(t);
    std::unique_ptr<MemoryTimeline> timeline;  // declared before the pool: outlives its last free
    MemoryPool pool;
    pool.set_budget(cfg.memory_budget);
    pool.set_oom_advisor(oom_advisor(cfg));
    const ModelFamily& family = *cfg.model;
    std::unique_ptr<RunData> data;
    std::unique_ptr<Model> model;
    agree_on_start(comm, "taking the run directory and opening the data", [&] {
        if (root) lock.emplace(opts.run_dir);
        check_budget_before_start(cfg);
        data = family.open_data(DataContext{cfg.seed, dp_rank, dp_ranks});
        model = cfg.pipe.active() ? build_pipeline_stage(cfg, mesh) : family.build_split(mesh.tp);
    });
    const double flops_per_sample = family.flops_per_sample();
    const int64_t tokens_per_sample = family.tokens_per_sample();
    EngineOptions eo = engine_options(cfg);
    eo.batch_share = batch_share_weight(cfg, dp_rank);
    const int64_t micro = rank_micro_batch(cfg, dp_rank);  // this rank's samples a micro-step
    eo.zero.hpz_group = mesh.hpz;
    eo.zero.priority = cfg.comm.priority;
    eo.comm = mesh.dp;
    eo.tp = mesh.tp;
    eo.pp = mesh.pp;
    eo.tied = mesh.tied;
    if (!opts.memory_timeline.empty()) {
        timeline = open_timeline(opts.memory_timeline, rank, ranks);
        pool.set_event_sink(timeline.get());
    }
    Engine engine(pool, std::move(model), std::move(eo));
    std::optional<ProgressiveValidation> progressive;  // streams: scored before trained on
    if (data && data->progressive_window() > 0) {
        progressive.emplace(data->progressive_window(), mesh.dp);
        engine.set_forward_outputs(progressive->outputs(), progressive->labels());
    }
    ImportedWeights init;
    agree_on_start(comm, "reading init_from", [&] {
        if (!cfg.init_from.empty()) init = import_weights(engine, family, cfg.init_from);
    });
    if (!init.arena.empty()) engine.load_master(init.arena.data());
    for (size_t i = 0; i < init.sparse.size(); ++i)
        engine.sparse_params()->load(i, init.sparse[i].data());
    init = ImportedWeights();
    ZeroDataParallel& dp = engine.data_parallel();
    std::optional<PipelineStep> pipe;
    if (cfg.pipe.active()) pipe.emplace(engine, mesh, cfg);

    CheckpointOptions co;
    co.dir = checkpoint_dir(cfg, opts.run_dir);
    co.interval_steps = cfg.checkpoint.interval_steps;
    co.keep_last = cfg.checkpoint.keep_last;
    co.async = cfg.checkpoint.async;
    co.stop_on_error = cfg.checkpoint.on_error == "stop";
    co.io.direct = cfg.checkpoint.direct_io;
    co.full_every = cfg.checkpoint.full_every;
    if (opts.resume == TrainOptions::Resume::kNo && opts.overwrite && root) {
        std::error_code ec;
        for (const std::string& c : checkpoint_candidates(co.dir))
            std::filesystem::remove_all(c, ec);
        std::filesystem::remove(co.dir + "/latest", ec);
    }
    TrainResult result;
    int64_t start_step = 0;
    std::optional<Manifest> resumed;  // the checkpoint resumed from
    // resume_latest's outcome is the same on every rank; agreeing makes its input errors end
    // every rank alike (exit code 2, no abort).
    if (opts.resume != TrainOptions::Resume::kNo)
        agree_on_start(comm, "resuming", [&] {
            std::vector<std::string> skipped;
            std::optional<Manifest> m = resume_latest(engine, comm, co.dir, &skipped, co.io);
            if (m) {
                resumed = m;
                start_step = m->step;
                result.resumed_from = m->step;
                result.steps = m->step;
            } else {
                std::string why;
                for (const std::string& s : skipped) why += "\n  " + s;
                ZT_CHECK(opts.resume == TrainOptions::Resume::kAuto && skipped.empty(),
                         "--resume: no checkpoint to resume from in ", co.dir,
                         skipped.empty() ? std::string(" (none was written)")
                                         : ", every one failed its checks:" + why);
            }
            ZT_CHECK(start_step <= cfg.steps, "--resume: the checkpoint is at step ", start_step,
                     ", past this run's steps = ", cfg.steps);
        });
    Checkpointer checkpointer(engine, comm, co);
    if (resumed) checkpointer.resumed(*resumed);
    if (progressive) {  // the window goes on across a resume (checkpoint_state_files.h)
        checkpointer.add_state_file(kProgressiveFile, [&] { return progressive->save(); });
        if (resumed) try {
                const std::string dir = co.dir + "/" + checkpoint_name(resumed->step);
                if (auto bytes = read_state_file(dir, *resumed, kProgressiveFile))
                    progressive->restore(*bytes);
            } catch (const Error& e) {  // metrics only: the window fills again
                if (root) log_warn("resume: progressive validation starts empty: ", e.message());
            }
    }
    if (co.full_every > 0 && !checkpointer.incremental() && root)
        log_warn(
            "checkpoint.incremental: this model has no sharded or dynamic embedding tables, the "
            "only state written incrementally; every checkpoint is full");
    GraceTimer grace(cfg.checkpoint.preempt_grace_s);
    RunProfilers profilers(cfg, engine, comm);

    std::optional<RunDirectory> run_dir;
    if (root) run_dir.emplace(opts.run_dir, lock->created_dir());
    std::optional<MetricsWriter> metrics;
    try {
        if (root)
            metrics.emplace(opts.run_dir + "/metrics.jsonl",
                            result.resumed_from >= 0 ? result.resumed_from : -1);
        if (root)  // the resolved config, for `zerotrain report`
            write_file_atomic(opts.run_dir + "/config.json", cfg.raw.dump(2) + "\n");
        std::optional<Monitor> monitor;  // rank 0's sinks: TensorBoard, CSV, Prometheus
        if (root)
            monitor.emplace(
                measured_ceilings(cfg, ranks),
                MonitorOptions{opts.run_dir, cfg.steps, cfg.steps_per_print, result.resumed_from});
        const double slow_s = slow_rank_delay_s(rank);  // ZT_FAULT_SLOW_RANK, for tests
        // A stream ends when it does: `steps` is only its cap, no ETA from it.
        Progress progress(data->is_stream() ? 0 : cfg.steps, cfg.steps_per_print, opts.tty);
        const bool speak = root && !opts.quiet;
        auto say = [&](const std::string& s) {
            if (speak) progress.message(s);
        };
        StepBreakdown breakdown(  // wall_clock_breakdown, memory_breakdown: rank 0 prints
            {cfg.wall_clock_breakdown, cfg.memory_breakdown, cfg.steps_per_print, cfg.steps},
            [&](const std::string& s) {
                if (speak)
                    progress.message(s);
                else if (root)
                    log_info(s);
            });
        say(str_cat("gemm: ", current_gemm_choice().summary(), "; OpenBLAS kernels ",
                    openblas_core_name()));
        say(str_cat("zerotrain: ", family.name(), " ",
                    (pipe ? family.param_count()  // every stage's, not this one's
                          : whole_numel(engine.arena().params())) +
                        (engine.sparse_params() ? engine.sparse_params()->numel() : 0),
                    " parameters, ", cfg.precision, ", ", num_threads(), " threads",
                    ranks > 1 ? str_cat(" x ", ranks, " ranks (", comm->backend(), mesh_words(cfg),
                                        "), ZeRO stage ", cfg.zero.stage)
                              : std::string(),
                    ", batch ", cfg.train_batch_size,
                    tokens_per_sample > 0 ? str_cat(" x ", tokens_per_sample, " tokens")
                                          : std::string(" samples"),
                    " (micro ", cfg.micro_batch, " x accumulation ", cfg.grad_accum,
                    dp_ranks > 1
                        ? str_cat(" x ", dp_ranks, dp_ranks < ranks ? " dp ranks" : " ranks")
                        : std::string(),
                    cfg.batch_shares.empty() ? std::string()
                                             : str_cat(", shares ", shares_words(cfg.batch_shares)),
                    ")"));
        // The step being trained, for fault injection's kill_in_writeback.
        auto training_step = std::make_shared<int64_t>(start_step + 1);
        if (SparseParams* sp = engine.sparse_params()) {  // the embedding plan: said and kept
            sp->on_tier_writeback(
                [rank, training_step] { fault_in_writeback(rank, *training_step); });
            for (const std::string& line : sp->describe()) say(line);
            if (root)
                write_file_atomic(opts.run_dir + "/embedding_plan.json",
                                  sp->plan_json().dump(2) + "\n");
        }
        if (result.resumed_from >= 0 && root)  // said even when quiet: what the run continues
            log_info("resumed from ", co.dir, "/", checkpoint_name(result.resumed_from),
                     " at step ", result.resumed_from);
        for (const std::string& note : data->notes()) say(note);
        if (pipe) say(pipe->describe());

        // The cost model's prediction for this layout, checked in every step's line.
        const std::unique_ptr<PlanCheck> plan_check =
            root ? start_plan_check(cfg, ranks, comm ? comm->backend() : "local", num_threads())
                 : nullptr;
        if (plan_check) say(plan_check->describe());
        // The root may have timed the run's products just now (Note [Shapes timed alone],
        // runtime/plan_check.cpp): the other ranks wait for it rather than compute beside it.
        if (comm && comm->size() > 1) comm->barrier()->wait();
        double last_checkpoint_s = -1;  // the step loop's stall for the checkpoint of a step
        UpdateStateStats offload_before = engine.update_state().stats();
        ParamTierStats params_before =
            engine.param_tier() ? engine.param_tier()->stats() : ParamTierStats{};
        if (std::string(engine.update_state().tier()) != "none") {
            const UpdateStateStats& os = offload_before;
            say(str_cat("optimizer offload: master weights and ", cfg.optimizer.type,
                        " state on the ", engine.update_state().tier(), " tier (",
                        format_bytes(static_cast<double>(os.tier_bytes)), " per rank, ",
                        format_bytes(static_cast<double>(os.staging_bytes)), " of staging buffers)",
                        engine.param_tier()
                            ? str_cat("; parameters on the ", engine.param_tier()->tier(), " tier")
                            : std::string(),
                        engine.host_grad_bytes() > 0
                            ? str_cat("; gradients in host memory (",
                                      format_bytes(static_cast<double>(engine.host_grad_bytes())),
                                      " per rank)")
                            : std::string()));
        }
        // Throughput in tokens for a token model, else in samples (ModelFamily).
        const int64_t units_per_step =
            cfg.train_batch_size * (tokens_per_sample > 0 ? tokens_per_sample : 1);
        const char* rate_key = tokens_per_sample > 0 ? "tokens_per_s" : "samples_per_s";
        const char* rate_unit = tokens_per_sample > 0 ? " tok/s" : " samples/s";
        double timed_s = 0;
        bool stream_ended = false;      // a stream (RunData::wait_for_train) ran out of records
        Stopwatch since_save;           // checkpoint.interval_seconds
        int64_t saved_at = start_step;  // the step of the last checkpoint (or the resumed one)
        // Note [Freshness at visibility]
        // A streamed record is fresh once a checkpoint that learned from it can be read: an
        // asynchronous checkpoint becomes visible steps after save() (poll() sees every rank's
        // write done), so the data source hears of a checkpoint (data->saved, which measures
        // the freshness) when it is visible, not when it is started.
        int64_t unseen_step = -1, unseen_end = 0;  // the last saved checkpoint not yet visible
        const auto tell_visible = [&] {
            if (unseen_step >= 0 && checkpointer.last_visible_step() >= unseen_step) {
                data->saved(unseen_end);
                unseen_step = -1;
            }
        };
        const auto saved_now = [&](int64_t steps) {
            tell_visible();  // save() finished the previous checkpoint first
            unseen_step = steps;
            unseen_end = steps * cfg.train_batch_size;
            tell_visible();  // synchronous: visible already
        };
        const bool lookahead = !pipe && engine.model().wants_lookahead();
        const std::vector<const Communicator*> model_channels =  // the tables' own, if any
            engine.sparse_params() ? engine.sparse_params()->channels()
                                   : std::vector<const Communicator*>{};
        for (int64_t step = start_step; step < cfg.steps; ++step) {
            *training_step = step + 1;
            if ((stream_ended =
                     !stream_step_ready(*data, comm, (step + 1) * cfg.train_batch_size))) {
                say(str_cat("the stream ended: no new records for the step after step ", step));
                break;
            }
            pool.reset_peaks();
            dp.reset_exposed_comm_s();
            const CommStats comm_before = mesh.stats(model_channels);
            const int64_t cross_before = mesh.cross_host_bytes();
            const CompressionStats compression_before = dp.grad_compression_stats();
            const CompressionStats weights_before = dp.weight_compression_stats();
            const bool onebit_compressed = engine.onebit_compressing();
            const CompressionStats momentum_before = engine.momentum_compression_stats()
                                                         ? *engine.momentum_compression_stats()
                                                         : CompressionStats{};
            profilers.before_step(step);
            Stopwatch sw;
            if (slow_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(slow_s));
            double io_s = 0;  // data loading
            {
                MemScope phase(pool, MemPhase::kForward);  // Tape::backward switches to backward
                for (int64_t m = 0; m < cfg.grad_accum; ++m) {
                    int64_t k0 = shared_sample_index(cfg, step, m, dp_rank, 0);
                    Stopwatch io;
                    const Batch batch = data->train_batch(k0, micro);
                    // The next micro-batch (of this step or the next) decodes while this one
                    // computes (readers that can, RunData::prefetch_train).
                    const bool last = m + 1 == cfg.grad_accum;
                    if (!last || step + 1 < cfg.steps) {
                        const int64_t next = shared_sample_index(cfg, last ? step + 1 : step,
                                                                 last ? 0 : m + 1, dp_rank, 0);
                        data->prefetch_train(next, micro);
                        // A model that reads ahead (embedding.tier) gets the next one's ids
                        // (an empty batch where the reader cannot say: every rank takes part).
                        if (lookahead) {
                            const std::optional<Batch> nb = data->peek_train(next, micro);
                            engine.model().lookahead(nb ? *nb : Batch{});
                        }
                    }
                    io_s += io.elapsed_s();
                    if (pipe)
                        pipe->add(batch);
                    else
                        breakdown.forward_backward(engine, batch);
                }
                if (pipe) pipe->run();
            }
            StepStats st;
            {
                MemScope phase(pool, MemPhase::kOptimizer);
                st = breakdown.step(engine);
            }
            fault_after_step(rank, ranks, step + 1);  // ZT_FAULT, for tests of the supervisor
            double dt = sw.elapsed_s();
            profilers.after_step(step, dt);
            const CommStats step_comm = stats_delta(mesh.stats(model_channels), comm_before);
            // Every rank's figures, gathered after the step so this gather is not in them.
            const bool report = (step + 1) % cfg.steps_per_print == 0 || step + 1 == cfg.steps;
            breakdown.after_step(step + 1, dp.exposed_comm_s(), pool.stats());
            const std::vector<RankFigures> figs =
                gather_rank_figures(comm,
                                    RankFigures{dt, dp.exposed_comm_s(), io_s, st.skipped,
                                                g_stop_requested != 0, pool.stats()},
                                    report ? step + 1 : 0);
            if (progressive) progressive->end_step();  // collective over dp
            // Collective over tp and pp: every rank, before the line rank 0 writes.
            const std::optional<QuantError> quant_error =
                quantization_error(engine, cfg.quantization, step + 1);
            bool stop = false;
            int64_t mem_peak = 0;  // the largest over ranks
            for (const RankFigures& f : figs) {
                stop = stop || f.stop;
                mem_peak = std::max(mem_peak, f.mem.total_peak);
            }
            if (step > start_step) timed_s += dt;
            result.steps = step + 1;
            result.final_loss = st.loss;
            if (root) {
                nlohmann::json mem = memory_json(pool.stats());
                double comm_s = 0;
                for (const RankFigures& f : figs) {  // the largest over ranks
                    comm_s = std::max(comm_s, f.comm_s);
                    for (int c = 0; c < kMemCategoryCount; ++c) {
                        const char* name = mem_category_name(static_cast<MemCategory>(c));
                        mem[name] = std::max(mem[name].get<int64_t>(), f.mem.current[c]);
                    }
                }
                mem["peak"] = mem_peak;
                nlohmann::json line = {
                    {"step", step + 1},
                    {"loss", st.loss},
                    {"lr", st.lr},
                    {"grad_norm", st.grad_norm},
                    {"step_time_s", dt},
                    {rate_key, units_per_step / dt},
                    {"mfu_flops_per_s", flops_per_sample * cfg.train_batch_size / dt},
                    {"mem", mem},
                    {"comm_s", comm_s},
                    {"skipped", st.skipped}};
                if (comm) {
                    line["comm"] = comm_json(step_comm);
                    if (mesh.cross_host())  // comm.hierarchical
                        line["comm_cross_host_bytes"] = mesh.cross_host_bytes() - cross_before;
                    // Rank 0's overlap: time with an op in flight, the part of it this rank
                    // waited, and the rest, hidden behind compute (Note [Busy time]).
                    const double busy = step_comm.busy_s, exposed = figs[0].comm_s;
                    line["comm_overlap"] = {{"busy_s", busy}, {"exposed_s", exposed}};
                    if (busy > 0) line["comm_overlap"]["hidden"] = 1.0 - exposed / busy;
                }
                if (cfg.precision == "fp16") line["loss_scale"] = st.loss_scale;
                if (UpdateState& us = engine.update_state(); std::string(us.tier()) != "none") {
                    const ParamTier* pt = engine.param_tier();
                    line["offload"] = offload_json(us, offload_before, pt, params_before);
                    offload_before = us.stats();  // rank 0's, as the lines above
                    if (pt) params_before = pt->stats();
                }
                if (nlohmann::json c = data->counters(); !c.empty()) line["data"] = c;
                if (progressive && report) line["progressive"] = progressive->metrics();
                if (SparseParams* sp = engine.sparse_params())
                    line["embedding"] = sp->step_counters();
                if (last_checkpoint_s >= 0) line["checkpoint_s"] = last_checkpoint_s;
                if (auto r = checkpointer.take_report()) line["checkpoint"] = *r;
                if (pipe) line["pipeline"] = pipe->metrics();
                if (cfg.grad_compression.enabled)
                    line["compression"] =
                        grad_compression_metrics(cfg.grad_compression, step + 1,
                                                 dp.grad_compression_stats(), compression_before);
                if (const CompressionStats* m = engine.momentum_compression_stats())
                    line["compression"] =
                        momentum_compression_metrics(onebit_compressed, *m, momentum_before);
                if (const CodecOptions* wc = dp.weight_codec())  // beside the gradients' entry
                    line["compression"].update(weight_compression_metrics(
                        *wc, dp.weight_compression_stats(), weights_before));
                if (cfg.quantization.enabled)
                    line["quantization"] =
                        quantization_metrics(quant_error, cfg.quantization, step + 1);
                if (const Pruner* pr = engine.pruner())  // per layer when the masks change
                    line["pruning"] = pr->metrics(
                        engine.steps_done(), step == start_step || pr->due(engine.steps_done()));
                if (step == start_step)  // the run's first line names its GEMM libraries
                    line["gemm"] = {{"choice", current_gemm_choice().summary()},
                                    {"openblas_kernels", openblas_core_name()}};
                if (plan_check) line["plan"] = plan_check->line(dt, mem);
                monitor->on_step(line, figs);  // adds per-rank figures, stragglers, mfu
                metrics->write(line);
            }
            last_checkpoint_s = -1;
            if (timeline) timeline->flush();  // after the step's line: a failure here follows it
            if (st.skipped) say(str_cat("step ", step + 1, ": non-finite gradients, step skipped"));
            if (speak)
                progress.update(
                    step + 1,
                    str_cat("loss ", st.loss, " | ", static_cast<int64_t>(units_per_step / dt),
                            rate_unit, " | mem ", format_bytes(static_cast<double>(mem_peak))));
            bool eval_now = data->has_eval() && cfg.eval_interval > 0 &&
                            ((step + 1) % cfg.eval_interval == 0 || step + 1 == cfg.steps);
            if (eval_now) {
                MemScope phase(pool, MemPhase::kForward);
                nlohmann::json line =
                    evaluate(engine, *data, cfg, mesh.dp, pipe ? &*pipe : nullptr);
                line["step"] = step + 1;
                if (root) {
                    monitor->on_line(line);
                    metrics->write(line);
                }
                result.final_eval_loss = line["eval_loss"].get<double>();
                std::string said;
                for (auto& [k, v] : line.items())
                    if (k != "step") said += str_cat(said.empty() ? "" : ", ", k, " ", v.dump());
                say(str_cat("step ", step + 1, ": ", said));
            }
            checkpointer.poll();
            tell_visible();
            const bool interval =
                (co.interval_steps > 0 && (step + 1) % co.interval_steps == 0) ||
                (cfg.checkpoint.interval_records > 0 &&
                 (step + 1 - saved_at) * cfg.train_batch_size >= cfg.checkpoint.interval_records) ||
                (cfg.checkpoint.interval_seconds > 0 &&
                 on_any_rank(comm, since_save.elapsed_s() >= cfg.checkpoint.interval_seconds));
            if (interval || stop) {
                since_save = Stopwatch();
                saved_at = step + 1;
                engine.apply_held_sparse();  // a checkpoint holds every update
                checkpointer.save();
                last_checkpoint_s = checkpointer.last_save_stall_s();
                saved_now(step + 1);
            }
            if (stop) {
                checkpointer.finish();
                tell_visible();
                result.preempted = true;
                if (root)
                    log_info("stopped by a signal after step ", step + 1, ": checkpoint ",
                             checkpoint_name(step + 1), " written; continue with --resume");
                break;
            }
        }
        if (stream_ended &&
            (co.interval_steps > 0 || cfg.checkpoint.interval_seconds > 0 ||
             cfg.checkpoint.interval_records > 0) &&
            result.steps > saved_at) {
            engine.apply_held_sparse();
            checkpointer.save();  // what the stream gave since the last checkpoint
            saved_now(result.steps);
        }
        checkpointer.finish();
        tell_visible();
        if (pipe) pipe->finish();
        profilers.finish();
        if (timeline) {  // the file ends with the state at the end of training, not the teardown
            pool.set_event_sink(nullptr);
            timeline->close();
        }
        if (speak) progress.finish();
        if (result.steps - start_step > 1)
            result.tokens_per_s = units_per_step * (result.steps - start_step - 1) / timed_s;
        if (result.preempted) return result;  // not finished: no final weights (Note [Failed runs])
        engine.apply_held_sparse();
        save_weights(engine, family, opts.run_dir + "/model.safetensors", root);
        say(str_cat("done: ", result.steps, " steps, final loss ", result.final_loss,
                    result.tokens_per_s > 0
                        ? str_cat(", ", static_cast<int64_t>(result.tokens_per_s), rate_unit)
                        : std::string(),
                    "; weights in ", opts.run_dir, "/model.safetensors"));
    } catch (const std::exception& e) {
        const auto* ze = dynamic_cast<const Error*>(&e);
        if (run_dir)
            run_dir->fail(metrics ? &*metrics : nullptr, result.steps,
                          ze ? ze->message() : e.what());
        throw;
    }
    return result;
}

}  // namespace zt
