#include "cli/commands.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "checkpoint/safetensors.h"
#include "comm/local/local_comm.h"
#include "comm/mpi/mpi_comm.h"
#include "data/tokens/tokenize.h"
#include "models/named_tensor.h"
#include "models/quantized_weights.h"
#include "runtime/config.h"
#include "runtime/keyed_rows_export.h"
#include "runtime/start_agreement.h"
#include "runtime/streamed_gather.h"
#include "runtime/supervisor_watch.h"
#include "runtime/trainer.h"
#include "tensor/threads.h"
#include "util/log.h"
#include "util/random.h"
#include "util/units.h"

namespace zt::cli {

namespace {

nlohmann::json load_json(const ConfigArgs& args) {
    nlohmann::json j = load_config_file(args.path);
    for (const std::string& s : args.sets) apply_override(j, s);
    return j;
}

TrainConfig parse(const nlohmann::json& j, int64_t world, bool warn) {
    ParsedConfig parsed = parse_config(j, world);
    if (warn)
        for (const std::string& w : parsed.warnings) log_warn("config: ", w);
    return parsed.config;
}

void add_config_options(CLI::App* sub, ConfigArgs& args) {
    sub->add_option("config", args.path, "JSON config (DeepSpeed keys plus zerotrain's)")
        ->required();
    sub->add_option("--set", args.sets, "override a config key: --set a.b=v (v parsed as JSON)");
}

// An integer option of at least `lo`; CLI11 prefixes the option's name to the message
// ("--ranks: expected an integer >= 1, got 0").
CLI::Validator at_least(int64_t lo) {
    return CLI::Validator(
        [lo](std::string& s) -> std::string {
            char* end = nullptr;
            errno = 0;
            const long long v = std::strtoll(s.c_str(), &end, 10);
            if (end == s.c_str() || *end != '\0' || errno == ERANGE)
                return str_cat("expected an integer >= ", lo, ", got \"", s, "\"");
            return v >= lo ? std::string() : str_cat("expected an integer >= ", lo, ", got ", s);
        },
        str_cat("INT>=", lo));
}

std::string default_run_dir(const std::string& config_path) {
    return "runs/" + std::filesystem::path(config_path).stem().string();
}

}  // namespace

void Commands::add_to(CLI::App& app) {
    add_train(app);
    add_estimate(app);
    add_export(app);
    add_checkpoint(app);
    add_data(app);
    add_bench(app);
    add_report(app);
    add_launch(app);
    add_plan(app, runners_);
}

int Commands::run() {
    for (auto& [sub, fn] : runners_)
        if (sub->parsed()) return fn();
    return 2;
}

void Commands::add_train(CLI::App& app) {
    CLI::App* sub = app.add_subcommand("train", "train a model from a config");
    sub_train_ = sub;
    add_config_options(sub, config_);
    sub->add_option("--run-dir", run_dir_, "where the run writes (default runs/<config name>)");
    sub->add_option("--threads", threads_, "intra-op threads (default: config's, else all cores)");
    sub->add_option("--memory-budget", memory_budget_, "per-rank memory budget, e.g. 8GiB");
    sub->add_flag("--quiet", quiet_, "no progress output");
    sub->add_flag("--auto", auto_plan_,
                  "run the planner's fastest layout that fits (docs/planner.md); records it in "
                  "RUN_DIR/plan.json");
    sub->add_option("--rank-speed", rank_speed_,
                    "with --auto: relative speed of each rank, comma-separated, or \"measured\" "
                    "(as `zerotrain plan`)");
    sub->add_option("--rank-memory", rank_memory_,
                    "with --auto: device memory of each rank, comma-separated (as `zerotrain "
                    "plan`)");
    sub->add_option("--memory-timeline", memory_timeline_,
                    "write one JSON line per allocation and free to FILE "
                    "(docs/memory-timeline.md)");
    sub->add_option("--resume", resume_,
                    "continue from the run's newest valid checkpoint; \"auto\": when there is "
                    "one, else start fresh")
        ->expected(0, 1)
        ->default_str("latest");
    sub->add_flag("--overwrite", overwrite_,
                  "start fresh even though the run directory holds checkpoints (deletes them)");
    sub->add_option("--ranks", ranks_,
                    "run N data-parallel ranks as threads of this process (comm backend "
                    "\"local\"); under mpirun or srun the launcher's processes are the ranks")
        ->check(at_least(1));
    runners_.emplace_back(sub, [this] {
        nlohmann::json j = load_json(config_);
        if (ranks_ > 0) {
            j["comm"]["backend"] = "local";
            j["comm"]["local_ranks"] = ranks_;
        }
        TrainOptions opts;
        opts.run_dir = run_dir_.empty() ? default_run_dir(config_.path) : run_dir_;
        ZT_CHECK(auto_plan_ || (rank_speed_.empty() && rank_memory_.empty()),
                 "train: --rank-speed and --rank-memory size the layout --auto plans; add --auto");
        if (auto_plan_) j = auto_plan(j, {memory_budget_, rank_speed_, rank_memory_}, opts.run_dir);
        opts.tty = isatty(STDERR_FILENO) != 0;
        opts.quiet = quiet_;
        opts.memory_timeline = memory_timeline_;
        if (sub_train_->count("--resume") > 0) {
            ZT_CHECK(resume_.empty() || resume_ == "latest" || resume_ == "auto",
                     "--resume: expected no value or \"auto\", got \"", resume_, "\"");
            opts.resume =
                resume_ == "auto" ? TrainOptions::Resume::kAuto : TrainOptions::Resume::kLatest;
        }
        opts.overwrite = overwrite_;
        install_preemption_handler();
        end_with_supervisor();  // under `zerotrain launch`: end when it dies
        train_on_ranks(j, opts);
        return 0;
    });
}

namespace {

// comm.timeout_s as given, for a rank whose config did not parse (it still takes part in the
// config agreement, which must not wait longer than the user asked): the default when absent or
// not a number >= 0.
double raw_comm_timeout_s(const nlohmann::json& j) {
    if (!j.is_object() || !j.contains("comm") || !j["comm"].is_object())
        return kDefaultCommTimeoutS;
    const nlohmann::json& c = j["comm"];
    if (!c.contains("timeout_s") || !c["timeout_s"].is_number()) return kDefaultCommTimeoutS;
    const double t = c["timeout_s"].get<double>();
    return t >= 0 ? t : kDefaultCommTimeoutS;
}

}  // namespace

// Note [Starting ranks]: the ranks come from the config's comm section: "local" runs
// comm.local_ranks threads here; "mpi" uses the launcher's processes when started by mpirun or
// srun, and is one process without a communicator otherwise. Each rank parses the config for the
// world it is in, and agree_on_config makes every rank stop with the same input error when any
// rank's config is invalid or differs, so a bad config never leaves a rank waiting. A failure
// once training has started may be one rank's own (out of memory, a bad file); under MPI it ends
// the whole job with MPI_Abort after the message, since the others would wait for it forever.
void Commands::train_on_ranks(const nlohmann::json& j, const TrainOptions& opts) {
    bool started = false;  // past the config agreement (MPI: set by the one rank of this process)
    auto train_rank = [&](Communicator* comm) {
        const int world = comm ? comm->size() : 1;
        const bool root = !comm || comm->rank() == 0;
        TrainConfig cfg;
        std::string error;
        try {
            cfg = parse(j, world, root);
            if (threads_ > 0) cfg.threads = threads_;
            if (!memory_budget_.empty())
                cfg.memory_budget = parse_bytes(memory_budget_, "--memory-budget");
            check_fresh_start(cfg, opts);
        } catch (const Error& e) {
            if (world == 1 || e.kind() != ErrorKind::kInput) throw;
            error = e.message();
        }
        // Note [Hang detection]: the limit guards the config agreement too, the first collective.
        if (comm) comm->set_timeout(error.empty() ? cfg.comm.timeout_s : raw_comm_timeout_s(j));
        if (world > 1) agree_on_config(*comm, hash_string(j.dump()), error);
        if (comm) comm->set_check_sequence(cfg.comm.check_sequence);
        // Note [Chunked ops]: chunks only serve urgent ops, which only priority issues.
        if (comm) comm->set_chunk_bytes(cfg.comm.priority ? cfg.comm.chunk_bytes : 0);
        started = true;
        run_training(cfg, opts, comm);
    };
    const nlohmann::json* comm_section = j.contains("comm") ? &j["comm"] : nullptr;
    const bool local = comm_section && comm_section->value("backend", "") == "local";
    if (local) {
        const int n = comm_section->value("local_ranks", 1);
        ZT_CHECK(n >= 1, "comm.local_ranks: expected >= 1, got ", n);
        run_local_ranks(n, [&](Communicator& c) { train_rank(&c); });
        return;
    }
    if (!launched_by_mpi_launcher()) {
        train_rank(nullptr);
        return;
    }
    std::unique_ptr<Communicator> world = mpi_world();
    try {
        train_rank(world.get());
    } catch (const std::exception& e) {
        // An error every rank throws alike ends each rank on its own (Note [Start agreement]).
        if (!started || world->size() == 1 || dynamic_cast<const AgreedError*>(&e)) throw;
        const auto* ze = dynamic_cast<const Error*>(&e);
        // Bad input found by one rank mid-run (a token id past the vocabulary) stays exit code 2,
        // so that `zerotrain launch` does not restart it.
        mpi_abort(ze && ze->kind() == ErrorKind::kInput ? 2 : 1,
                  str_cat("rank ", world->rank(), ": ", ze ? ze->message() : e.what()));
    }
}

void Commands::add_export(CLI::App& app) {
    CLI::App* sub = app.add_subcommand(
        "export", "write a model's weights as safetensors (nanoGPT names and layout)");
    add_config_options(sub, config_);
    sub->add_option("--out", out_path_, "output .safetensors file")->required();
    sub->add_option("--from", from_run_,
                    "a run directory (its final weights, else its newest checkpoint) or a "
                    "checkpoint directory, of any layout (default: the config's initial "
                    "weights, from seed or init_from)");
    sub->add_option("--dtype", weight_dtype_, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}));
    sub->add_option("--quantize", quantize_,
                    "int8, fp8_e4m3 or fp8_e5m2: the Linear weights (those of "
                    "compression.quantization.params when given) as codes with a scale per row")
        ->check(CLI::IsMember({"int8", "fp8_e4m3", "fp8_e5m2"}));
    sub->add_flag("--compact", compact_,
                  "remove the heads and MLP channels structured pruning zeroed (GPT) or the "
                  "embedding rows rows pruning zeroed (DLRM, with their id maps in "
                  "OUT.id_map.safetensors): writes the smaller weights to --out and a training "
                  "config for them beside it (OUT.config.json, docs/pruning.md)");
    runners_.emplace_back(sub, [this] {
        ZT_CHECK(!compact_ || quantize_.empty(),
                 "export: --compact and --quantize together are not supported; compact first, "
                 "then export the compact run with --quantize");
        // The weights of any layout come back whole (--from consolidates them), so the batch,
        // which had to fit the rank count of the run that trained, is not checked against this
        // one process: train_batch_size is left to be derived from the per-rank terms.
        nlohmann::json j = load_json(config_);
        j.erase("train_batch_size");
        j.erase("parallel");  // one process, unsplit, whatever mesh the run had
        TrainConfig cfg = parse(j, 1, true);
        cfg.zero.stage = 0;  // one process holding the whole model, whatever the run used
        cfg.zero.offload_optimizer.device = "none";  // in memory: export reads them in place
        cfg.zero.offload_param.device = "none";
        MemoryPool pool;
        Engine engine(pool, build_model(cfg), engine_options(cfg));
        std::vector<NamedTensorF32> named;
        for (Parameter* p : engine.arena().params())
            named.push_back({p->name, p->shape, p->master.data<float>()});
        // Sharded embedding tables (one rank here holds them whole), after the arena's.
        // Tables on a tier (maybe larger than memory) go through a mapped scratch file.
        std::vector<std::vector<float>> sparse;
        std::vector<std::unique_ptr<MappedScratch>> scratch;
        auto add_sparse = [&] {
            SparseParams* sp = engine.sparse_params();
            if (!sp) return;
            const std::vector<std::string> names = sp->names();
            sparse.reserve(names.size());
            for (size_t i = 0; i < names.size(); ++i) {
                const bool streamed = sp->streamed(i);
                sparse.push_back(streamed ? std::vector<float>{} : sp->gather(i, 0));
                scratch.push_back(streamed ? gather_streamed(*sp, i, out_path_, true) : nullptr);
                named.push_back({names[i], sp->shape(i),
                                 scratch.back() ? scratch.back()->data() : sparse.back().data()});
            }
        };
        // Dynamic tables' rows (with their ids) come from checkpoints only: model.safetensors
        // holds their values without ids.
        const bool keyed = engine.sparse_params() && has_keyed_rows(*engine.sparse_params());
        if (!from_run_.empty() &&
            (keyed || !std::filesystem::exists(from_run_ + "/model.safetensors"))) {
            load_checkpoint_weights(from_run_, engine);  // consolidates any layout
            add_sparse();
        } else {
            add_sparse();
            std::string src = !from_run_.empty() ? from_run_ + "/model.safetensors" : cfg.init_from;
            if (!src.empty()) cfg.model->import_weights(src, named);
        }
        const std::string dtype = weight_dtype_ == "bf16" ? "BF16" : "F32";
        if (compact_) {
            write_compact(cfg, named, dtype);
        } else if (quantize_.empty()) {
            cfg.model->export_weights(out_path_, named, dtype);
        } else {  // the Linears quantization-aware training quantizes
            std::set<std::string> targets;
            for (Parameter* p : engine.arena().params()) {
                if (!p->prunable) continue;  // a Linear's weight
                bool match = cfg.quantization.params.empty();
                for (const std::string& s : cfg.quantization.params)
                    match = match || p->name.find(s) != std::string::npos;
                if (match) targets.insert(p->name);
            }
            write_quantized_weights(out_path_, named, targets, parse_quant_format(quantize_),
                                    dtype);
        }
        if (keyed) {  // with their ids, beside the weights (docs/embedding-dynamic.md)
            write_keyed_rows(*engine.sparse_params(), keyed_rows_path(out_path_), true);
            std::fprintf(stderr, "wrote %s (dynamic tables' rows and ids)\n",
                         keyed_rows_path(out_path_).c_str());
        }
        std::fprintf(stderr, "wrote %s (%zu tensors)\n", out_path_.c_str(), named.size());
        return 0;
    });
}

namespace {
// OUT.safetensors -> OUT.config.json
std::string compact_config_path(const std::string& weights) {
    std::string base = weights;
    const std::string ext = ".safetensors";
    if (base.size() > ext.size() && base.ends_with(ext)) base.resize(base.size() - ext.size());
    return base + ".config.json";
}
}  // namespace

// export --compact: the smaller weights at --out, and beside them the config it came from with
// the smaller model section, init_from the weights and compression.pruning removed, so that
// `zerotrain train OUT.config.json` trains the compact model.
void Commands::write_compact(const TrainConfig& cfg, std::span<const NamedTensorF32> named,
                             const std::string& dtype) const {
    CompactModel cm = cfg.model->compact(named, std::filesystem::absolute(out_path_).string());
    const std::vector<NamedTensorF32> views = cm.views();
    cfg.model->export_weights(out_path_, views, dtype);
    if (!cm.index_names.empty()) {
        SafetensorsWriter w;
        for (size_t i = 0; i < cm.index_names.size(); ++i)
            w.add(cm.index_names[i], "I32", {static_cast<int64_t>(cm.index_data[i].size())},
                  cm.index_data[i].data(), cm.index_data[i].size() * sizeof(int32_t));
        w.add_metadata("producer", "zerotrain");
        w.write(cm.index_path);
    }
    nlohmann::json j = load_json(config_);
    if (cm.whole_model)
        j["model"] = cm.model;
    else
        for (auto& [k, v] : cm.model.items()) j["model"][k] = v;
    if (j.contains("compression")) {
        j["compression"].erase("pruning");
        if (j["compression"].empty()) j.erase("compression");
    }
    j["init_from"] = std::filesystem::absolute(out_path_).string();
    const std::string path = compact_config_path(out_path_);
    std::ofstream f(path);
    ZT_CHECK(f.good(), "export --compact: cannot write ", path);
    f << j.dump(2) << "\n";
    ZT_CHECK(f.good(), "export --compact: cannot write ", path);
    int64_t before = 0, after = 0;
    for (const NamedTensorF32& t : named) before += shape_numel(t.shape);
    for (const NamedTensorF32& t : views) after += shape_numel(t.shape);
    std::fprintf(stderr, "compact: %s; %lld -> %lld parameters; wrote %s\n", cm.summary.c_str(),
                 static_cast<long long>(before), static_cast<long long>(after), path.c_str());
}

void Commands::add_checkpoint(CLI::App& app) {
    CLI::App* ck = app.add_subcommand("checkpoint", "inspect checkpoints");
    ck->require_subcommand(1);
    CLI::App* inspect = ck->add_subcommand(
        "inspect", "show a checkpoint's layout, model, counters and files, verifying each file");
    inspect
        ->add_option("dir", in_path_,
                     "a checkpoint directory (step_N), a checkpoints directory or a run "
                     "directory (its newest checkpoint)")
        ->required();
    inspect->add_flag("--json", estimate_.json, "print the manifest as JSON");
    runners_.emplace_back(inspect, [this] { return inspect_checkpoint(in_path_, estimate_.json); });
}

void Commands::add_data(CLI::App& app) {
    CLI::App* data = app.add_subcommand("data", "data preparation");
    data->require_subcommand(1);
    CLI::App* tok = data->add_subcommand("tokenize", "byte-level tokenization of a text file");
    tok->add_option("input", in_path_, "text file")->required();
    tok->add_option("output", out_path_, "token file to write")->required();
    tok->add_option("--dtype", token_dtype_, "uint16 or uint32")
        ->check(CLI::IsMember({"uint16", "uint32"}));
    runners_.emplace_back(tok, [this] {
        tokenize_file(in_path_, out_path_, parse_token_dtype(token_dtype_));
        std::fprintf(stderr, "wrote %s\n", out_path_.c_str());
        return 0;
    });
    add_data_ctr(data, runners_);
}

void Commands::add_bench(CLI::App& app) {
    CLI::App* bench = app.add_subcommand("bench", "measure this machine");
    bench->require_subcommand(1);
    CLI::App* g = bench->add_subcommand("gemm", "GEMM ceilings per library and dtype");
    g->add_option("--threads", threads_, "threads (default all cores)");
    g->add_option("--json", bench_out_, "also write the results as JSON to this file");
    g->add_flag("--remeasure", bench_remeasure_,
                "measure the engine's GEMM choice again instead of reading its cache");
    runners_.emplace_back(g, [this] {
        if (threads_ > 0) set_num_threads(threads_);
        return run_bench_gemm(bench_out_, bench_remeasure_);
    });
    CLI::App* pk = bench->add_subcommand(
        "peak", "the hardware's limits: fp32 FMA, bf16 dot and AMX loops, memory read bandwidth");
    pk->add_option("--threads", threads_, "measure at 1..N threads (default all cores)")
        ->check(CLI::PositiveNumber);
    pk->add_option("--seconds", bench_seconds_, "seconds per kernel (default 0.2)")
        ->check(CLI::PositiveNumber);
    pk->add_option("--json", bench_out_, "also write the results as JSON to this file");
    runners_.emplace_back(pk,
                          [this] { return run_bench_peak(threads_, bench_seconds_, bench_out_); });
    add_bench_calibrate(bench, runners_);
}

void Commands::add_launch(CLI::App& app) {
    CLI::App* sub = app.add_subcommand(
        "launch",
        "run `train` under mpirun or srun and restart it from its newest checkpoint "
        "when a rank dies: zerotrain launch -n N [options] -- train CONFIG ...");
    LaunchArgs& a = launch_;
    sub->add_option("-n,--np", a.ranks, "ranks to start")->required()->check(at_least(1));
    sub->add_option("--max-restarts", a.max_restarts, "restarts before giving up (default 3)")
        ->check(at_least(0));
    sub->add_option("--min-ranks", a.min_ranks,
                    "elastic: a restart that fails before its first step may go on with as few "
                    "as this many ranks, keeping train_batch_size by raising accumulation");
    sub->add_option("--launcher", a.launcher, "mpirun, srun, or auto (srun inside Slurm)")
        ->check(CLI::IsMember({"auto", "mpirun", "srun"}));
    sub->add_option("--launcher-args", a.launcher_args,
                    "extra arguments for mpirun or srun, e.g. \"--hostfile hosts\"");
    sub->add_option("job", a.job, "after --: train CONFIG [train options]")->required();
    runners_.emplace_back(sub, [this] { return run_launch(launch_); });
}

}  // namespace zt::cli
