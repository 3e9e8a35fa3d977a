// `zerotrain data synth-ctr` and `zerotrain data prepare-ctr` (docs/click-data.md): synthetic click
// logs with a known teacher, and Criteo TSV to the binary click format.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "data/click/criteo_tsv.h"
#include "data/click/criteo_tsv_stream.h"
#include "data/click/synth_ctr.h"
#include "data/click/synth_ctr_stream.h"
#include "util/error.h"

namespace zt::cli {

namespace {

struct CtrArgs {
    std::string out, eval_out, in, tables, on_bad = "fatal";
    int64_t rows = 0, eval_rows = 0, max_rows = 0;
    uint64_t seed = 0;
    bool kaggle = false;
    int dense = 13, hotness = 1, threads = 0;
    double zipf = 1.05;
    std::string stream;  // synth-ctr --stream DIR: parts of --rows records each
    int64_t files = 1, first_file = 0;
    double rate = 0, drift = 0, teacher_drift = 0;
    double flush_s = 1.0;  // prepare-ctr --stream
    bool follow = false;
    bool raw_ids = false;    // synth-ctr --raw-ids
    std::string raw_tables;  // synth-ctr --raw-tables K1,K2,...
};

// The integers of a comma list, in order; `check(item, value, ok)` throws the option's error for an
// item (ok false: not an integer) or a value outside the option's range.
std::vector<int64_t> comma_ints(
    const std::string& text,
    const std::function<void(const std::string& item, int64_t value, bool ok)>& check) {
    std::vector<int64_t> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        size_t used = 0;
        int64_t v = 0;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        check(item, v, used == item.size() && !item.empty());
        out.push_back(v);
    }
    return out;
}

// The table sizes from --tables/--table-rows (a comma list) or --kaggle-tables, capped by
// --max-rows. `option` names the list option in messages.
std::vector<int64_t> table_rows(const CtrArgs& a, const std::string& option) {
    ZT_CHECK(a.kaggle != !a.tables.empty(), "give exactly one of ", option,
             " R1,R2,... and --kaggle-tables");
    ZT_CHECK(a.max_rows >= 0, "--max-rows must be positive, got ", a.max_rows);
    std::vector<int64_t> rows;
    if (a.kaggle) {
        rows = criteo_kaggle_table_rows();
    } else {
        // prepare-ctr's 0: the table keeps the raw 64-bit values (a dynamic table's)
        const int64_t least = option == "--table-rows" ? 0 : 1;
        rows = comma_ints(a.tables, [&](const std::string& item, int64_t v, bool ok) {
            ZT_CHECK(ok && v >= least && v <= (int64_t{1} << 31), option, ": \"", item,
                     "\" is not a table size in [", least,
                     ", 2^31] (expected a comma list such as 1000,50,20000",
                     least == 0 ? "; 0 keeps a column's raw 64-bit values)" : ")");
        });
        ZT_CHECK(!rows.empty(), option, ": no table sizes given");
    }
    if (a.max_rows > 0)
        for (auto& r : rows) r = std::min(r, a.max_rows);
    return rows;
}

// The teacher and layout options of synth-ctr (records and eval records aside).
SynthCtrOptions synth_options(const CtrArgs& a) {
    SynthCtrOptions o;
    o.seed = a.seed;
    o.table_rows = table_rows(a, "--tables");
    o.dense_features = a.dense;
    o.zipf = a.zipf;
    o.hotness = a.hotness;
    o.threads = a.threads;
    if (a.raw_ids) o.raw_ids.assign(o.table_rows.size(), true);
    if (!a.raw_tables.empty()) {  // some tables only (beside static ones)
        ZT_CHECK(!a.raw_ids, "give --raw-ids (every table) or --raw-tables (some), not both");
        o.raw_ids.assign(o.table_rows.size(), false);
        const auto n = static_cast<int64_t>(o.table_rows.size());
        for (int64_t k : comma_ints(a.raw_tables, [&](const std::string&item, int64_t v, bool ok) {
                 ZT_CHECK(ok && v >= 0 && v < n, "--raw-tables: \"", item,
                          "\" is not a table index in [0, ", n, ")");
             }))
            o.raw_ids[static_cast<size_t>(k)] = true;
    }
    return o;
}

// synth-ctr --stream: parts arriving in a directory (data/click/synth_ctr_stream.h).
int run_synth_stream(const CtrArgs& a) {
    ZT_CHECK(a.out.empty() && a.eval_rows == 0,
             "--stream writes parts into a directory: drop "
             "--out and --eval-rows (evaluate on a separate synth-ctr file)");
    SynthStreamOptions o;
    o.records = synth_options(a);
    o.records.drift = a.drift;
    o.records.teacher_drift = a.teacher_drift;
    o.files = a.files;
    o.first_file = a.first_file;
    o.records_per_file = a.rows;
    o.rate = a.rate;
    write_synth_stream(o, a.stream, [](int64_t, const std::string& path) {
        std::printf("wrote %s\n", path.c_str());
        std::fflush(stdout);
    });
    return 0;
}

int run_synth(const CtrArgs& a) {
    ZT_CHECK(a.rows >= 1, "--rows must be at least 1, got ", a.rows);
    if (!a.stream.empty()) return run_synth_stream(a);
    ZT_CHECK(!a.out.empty(), "give --out FILE (or --stream DIR)");
    ZT_CHECK((a.eval_rows > 0) == !a.eval_out.empty(),
             "--eval-rows and --eval-out go together (got --eval-rows ", a.eval_rows,
             a.eval_out.empty() ? " without --eval-out)" : " with --eval-out)");
    SynthCtrOptions o = synth_options(a);
    o.records = a.rows;
    o.eval_records = a.eval_rows;
    const auto t0 = std::chrono::steady_clock::now();
    const SynthCtrResult r = write_synth_ctr(o, a.out, a.eval_out);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wrote %s: %lld records, %d dense, %zu tables, hotness %d\n", a.out.c_str(),
                static_cast<long long>(r.records), o.dense_features, o.table_rows.size(),
                o.hotness);
    if (r.eval_records > 0)
        std::printf("wrote %s: %lld eval records\n", a.eval_out.c_str(),
                    static_cast<long long>(r.eval_records));
    std::printf("teacher on %s records: auc %.4f, log loss %.4f; positive rate %.4f\n",
                r.eval_records > 0 ? "eval" : "train", r.teacher_auc, r.teacher_log_loss,
                r.positive_rate);
    std::printf("%.2f s, %.0f records/s\n", secs,
                static_cast<double>(r.records + r.eval_records) / std::max(secs, 1e-9));
    const nlohmann::json j = {{"path", a.out},
                              {"records", r.records},
                              {"eval_path", a.eval_out},
                              {"eval_records", r.eval_records},
                              {"seed", o.seed},
                              {"table_rows", o.table_rows},
                              {"raw_ids", o.raw_ids},
                              {"dense_features", o.dense_features},
                              {"zipf", o.zipf},
                              {"hotness", o.hotness},
                              {"teacher_auc", r.teacher_auc},
                              {"teacher_log_loss", r.teacher_log_loss},
                              {"teacher_on", r.eval_records > 0 ? "eval" : "train"},
                              {"positive_rate", r.positive_rate},
                              {"seconds", secs}};
    std::ofstream(a.out + ".json") << j.dump(2) << "\n";
    return 0;
}

int run_prepare(const CtrArgs& a) {
    const std::vector<int64_t> rows = table_rows(a, "--table-rows");
    ZT_CHECK(rows.size() == kCriteoCategorical, "--table-rows: ", rows.size(),
             " sizes given, Criteo TSV has ", kCriteoCategorical, " categorical columns");
    const BadRecord on_bad = a.on_bad == "skip" ? BadRecord::kSkip : BadRecord::kFatal;
    if (!a.stream.empty()) {  // parts as lines arrive (data/click/criteo_tsv_stream.h)
        ZT_CHECK(a.out.empty(), "--stream DIR writes parts: drop the output file");
        TsvStreamOptions o;
        o.in = a.in;
        o.dir = a.stream;
        o.table_rows = rows;
        o.on_bad = on_bad;
        o.part_records = a.rows > 0 ? a.rows : 8192;
        o.flush_s = a.flush_s;
        o.follow = a.follow;
        const TsvStreamResult r = stream_criteo_tsv(o);
        std::printf("wrote %lld parts into %s: %lld records (%lld bad lines skipped)\n",
                    static_cast<long long>(r.parts), a.stream.c_str(),
                    static_cast<long long>(r.records), static_cast<long long>(r.skipped));
        return 0;
    }
    ZT_CHECK(!a.out.empty(), "give the output ZTCLICK file (or --stream DIR)");
    const auto t0 = std::chrono::steady_clock::now();
    auto progress = [&](int64_t done, int64_t total) {
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "\rprepare-ctr: %.1f / %.1f MiB (%.0f%%), %.1f s", done / 1048576.0,
                     total / 1048576.0, 100.0 * done / std::max<int64_t>(total, 1), secs);
        if (done == total) std::fprintf(stderr, "\n");
    };
    const CriteoConvertResult r = convert_criteo_tsv(a.in, a.out, rows, on_bad, progress);
    std::printf("wrote %s: %lld records (%lld bad lines skipped)\n", a.out.c_str(),
                static_cast<long long>(r.records), static_cast<long long>(r.skipped));
    return 0;
}

}  // namespace

void add_data_ctr(CLI::App* data,
                  std::vector<std::pair<CLI::App*, std::function<int()>>>& runners) {
    auto a = std::make_shared<CtrArgs>();  // owned by the runners, which outlive parsing

    CLI::App* s = data->add_subcommand("synth-ctr", "synthetic click logs with a hidden teacher");
    s->add_option("--rows", a->rows, "training records")->required();
    s->add_option("--seed", a->seed, "seed (same seed, same files)")->required();
    s->add_option("--out", a->out, "ZTCLICK file to write");
    s->add_option("--stream", a->stream,
                  "a directory to write a stream of parts into (--rows each)");
    s->add_option("--files", a->files, "--stream: parts to write (default 1)");
    s->add_option("--first-file", a->first_file,
                  "--stream: the first part's number (continue a stream)");
    s->add_option("--rate", a->rate, "--stream: records per second (default 0: all at once)");
    s->add_option("--drift", a->drift, "--stream: Zipf ranks the ids' popularity moves per record");
    s->add_option("--teacher-drift", a->teacher_drift,
                  "--stream: radians per record the teacher turns towards a second one");
    s->add_option("--eval-rows", a->eval_rows, "held-out records from the same teacher");
    s->add_option("--eval-out", a->eval_out, "ZTCLICK file for the held-out records");
    s->add_option("--tables", a->tables, "table sizes, a comma list (R1,R2,...)");
    s->add_flag("--kaggle-tables", a->kaggle, "the 26 Criteo Kaggle table sizes");
    s->add_option("--max-rows", a->max_rows, "cap every table at this many rows");
    s->add_option("--dense", a->dense, "dense features (default 13)");
    s->add_option("--zipf", a->zipf, "id popularity exponent (default 1.05)");
    s->add_option("--hotness", a->hotness, "ids per bag (default 1)");
    s->add_option("--threads", a->threads, "generator threads (default all cores)");
    s->add_flag("--raw-ids", a->raw_ids,
                "write raw 64-bit ids (a mix of table and id; for dynamic tables)");
    s->add_option("--raw-tables", a->raw_tables,
                  "raw 64-bit ids for these tables only (comma list of indices from 0)");
    runners.emplace_back(s, [a] { return run_synth(*a); });

    CLI::App* p = data->add_subcommand("prepare-ctr", "Criteo TSV to the binary click format");
    p->add_option("input", a->in, "Criteo TSV file (- for standard input with --stream)")
        ->required();
    p->add_option("output", a->out, "ZTCLICK file to write");
    p->add_option("--stream", a->stream, "write parts into this directory as lines arrive");
    p->add_option("--rows", a->rows, "--stream: records per part (default 8192)");
    p->add_option("--flush-s", a->flush_s,
                  "--stream: a part at the latest this long after its first line (default 1)");
    p->add_flag("--follow", a->follow,
                "--stream: at the end of the file, wait for more lines (tail -f)");
    p->add_option(
        "--table-rows", a->tables,
        "table sizes ids are hashed into (26, comma list; 0 keeps the raw 64-bit values)");
    p->add_flag("--kaggle-tables", a->kaggle, "the 26 Criteo Kaggle table sizes");
    p->add_option("--max-rows", a->max_rows, "cap every table at this many rows");
    p->add_option("--on-bad-record", a->on_bad, "fatal (default) or skip")
        ->check(CLI::IsMember({"fatal", "skip"}));
    runners.emplace_back(p, [a] { return run_prepare(*a); });
}

}  // namespace zt::cli
