// DLRM's run data: click records (docs/click-data.md) from a seeded synthetic log with a hidden
// teacher, a prepared binary click file, or a Criteo TSV converted when the run starts. Generated
// and converted files live in the temporary directory only while they are being opened: they are
// unlinked once mapped, so nothing is left behind however the run ends.

#include <cstdio>
#include <filesystem>
#include <memory>

#include "data/click/click_dataset.h"
#include "data/click/click_prefetcher.h"
#include "data/click/criteo_tsv.h"
#include "data/click/ctr_file.h"
#include "data/click/synth_ctr.h"
#include "models/dlrm/dlrm_family.h"
#include "models/dlrm/dlrm_stream_data.h"
#include "util/error.h"
#include "util/temp_files.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

// Opens a file made for this run and unlinks it: the mapping keeps the data alive.
std::shared_ptr<const CtrFile> open_and_unlink(const std::string& path) {
    std::shared_ptr<const CtrFile> f;
    try {
        f = CtrFile::open(path);
    } catch (...) {
        std::error_code ec;
        fs::remove(path, ec);
        throw;
    }
    std::error_code ec;
    fs::remove(path, ec);
    return f;
}

class DlrmRunData final : public RunData {
  public:
    DlrmRunData(const DlrmOptions& model, const DlrmDataOptions& dc, const DataContext& ctx);

    Batch train_batch(int64_t k0, int64_t count) override {
        const ClickBatchBuffers& b = prefetcher_->load(k0, count);
        unique_ids_ = b.unique_ids;
        return click_batch(b, train_click_);
    }
    void prefetch_train(int64_t k0, int64_t count) override { prefetcher_->prefetch(k0, count); }
    std::optional<Batch> peek_train(int64_t k0, int64_t count) override {
        const ClickBatchBuffers* b = prefetcher_->peek(k0, count);
        if (!b) return std::nullopt;
        return click_batch(*b, peek_click_);
    }
    bool has_eval() const override { return eval_ != nullptr; }
    Batch eval_batch(int64_t k0, int64_t count) override {
        eval_->fill(k0, count, eval_buffers_);
        return click_batch(eval_buffers_, eval_click_);
    }
    std::vector<std::string> notes() const override { return notes_; }
    // The last training micro-batch's distinct ids per table (the rows its backward touched),
    // and for Criteo TSV the lines skipped as bad.
    nlohmann::json counters() const override {
        nlohmann::json j = {{"unique_ids", unique_ids_}};
        if (skipped_ >= 0) j["records_skipped"] = skipped_;
        return j;
    }

  private:
    void check_layout(const CtrFile& f, const DlrmOptions& model, const std::string& key) const;

    std::shared_ptr<const CtrFile> train_file_, eval_file_;
    std::unique_ptr<ClickDataset> train_, eval_;
    std::unique_ptr<ClickPrefetcher> prefetcher_;
    ClickBatchBuffers eval_buffers_;
    ClickBatch train_click_, eval_click_, peek_click_;
    std::vector<std::string> notes_;
    int64_t skipped_ = -1;  // criteo_tsv: lines skipped as bad
    std::vector<int64_t> unique_ids_;
};

void DlrmRunData::check_layout(const CtrFile& f, const DlrmOptions& model,
                               const std::string& key) const {
    ZT_CHECK(f.dense_features() == model.dense_features, key, ": ", f.path(), " has ",
             f.dense_features(), " dense features; model.dense_features is ", model.dense_features);
    ZT_CHECK(f.tables() == static_cast<int>(model.tables.size()), key, ": ", f.path(), " has ",
             f.tables(), " categorical features; the model has ", model.tables.size(), " tables");
    for (int k = 0; k < f.tables(); ++k)
        check_click_table(f, k, model.tables[static_cast<size_t>(k)], key);
}

DlrmRunData::DlrmRunData(const DlrmOptions& model, const DlrmDataOptions& dc,
                         const DataContext& ctx) {
    std::vector<int64_t> rows;  // the raw ids' range (a compacted table's id map maps them), 0: raw
    for (const DlrmTable& t : model.tables) rows.push_back(dlrm_file_rows(t));
    if (dc.type == "synthetic") {
        SynthCtrOptions so = dlrm_synth_options(model, dc);
        so.records = dc.records;
        so.eval_records = dc.eval_records;
        const std::string train_path = make_temp_path("synth.ctr");
        const std::string eval_path = dc.eval_records > 0 ? make_temp_path("synth-eval.ctr") : "";
        const SynthCtrResult r = write_synth_ctr(so, train_path, eval_path);
        train_file_ = open_and_unlink(train_path);
        if (!eval_path.empty()) eval_file_ = open_and_unlink(eval_path);
        notes_.push_back(str_cat("synthetic click log: ", r.records, " records (", r.eval_records,
                                 " held out), positive rate ", r.positive_rate,
                                 "; the hidden teacher scores AUC ", r.teacher_auc, ", log loss ",
                                 r.teacher_log_loss,
                                 " on the held-out records (the best reachable)"));
    } else if (dc.type == "criteo_tsv") {
        const BadRecord bad = dc.on_bad_record == "skip" ? BadRecord::kSkip : BadRecord::kFatal;
        const std::string train_path = make_temp_path("criteo.ctr");
        const CriteoConvertResult r = convert_criteo_tsv(dc.path, train_path, rows, bad);
        train_file_ = open_and_unlink(train_path);
        skipped_ = r.skipped;
        if (!dc.eval_path.empty()) {
            const std::string eval_path = make_temp_path("criteo-eval.ctr");
            const CriteoConvertResult e = convert_criteo_tsv(dc.eval_path, eval_path, rows, bad);
            eval_file_ = open_and_unlink(eval_path);
            skipped_ += e.skipped;
        }
        notes_.push_back(str_cat("Criteo TSV ", dc.path, ": ", r.records, " records, ", r.skipped,
                                 " bad lines skipped"));
    } else {
        train_file_ = CtrFile::open(dc.path);
        if (!dc.eval_path.empty()) eval_file_ = CtrFile::open(dc.eval_path);
    }
    check_layout(*train_file_, model, "data.path");
    if (eval_file_) check_layout(*eval_file_, model, "data.eval_path");

    const int64_t n = train_file_->records();
    ZT_CHECK(n >= 1, "data.path: ", train_file_->path(), " holds no records");
    int64_t held = 0;
    if (!eval_file_ && dc.eval_fraction > 0) {
        held =
            std::max<int64_t>(1, static_cast<int64_t>(dc.eval_fraction * static_cast<double>(n)));
        ZT_CHECK(held < n, "data.eval_fraction: ", dc.eval_fraction, " holds out all ", n,
                 " records; lower it");
    }
    ClickDatasetOptions to;
    to.shuffle = dc.shuffle;
    to.seed = ctx.seed;
    to.begin = 0;
    to.end = n - held;
    train_ = std::make_unique<ClickDataset>(train_file_, to);
    ClickDatasetOptions eo;
    eo.shuffle = false;
    if (eval_file_) {
        eval_ = std::make_unique<ClickDataset>(eval_file_, eo);
    } else if (held > 0) {
        eo.begin = n - held;
        eo.end = n;
        eval_ = std::make_unique<ClickDataset>(train_file_, eo);
    }
    prefetcher_ = std::make_unique<ClickPrefetcher>(*train_);
}

}  // namespace

void check_click_table(const CtrFile& f, int k, const DlrmTable& t, const std::string& key) {
    const int64_t rows = f.table_rows()[static_cast<size_t>(k)];
    if (t.dynamic && t.dyn.raw_ids) return;  // any id, raw or below rows_k
    ZT_CHECK(rows != 0, key, ": ", f.path(), " holds raw 64-bit ids for feature ", k,
             "; only a dynamic table with \"raw_ids\": true reads them (model.tables[", k, "])");
    const int64_t ids = dlrm_id_range(t);
    ZT_CHECK(rows <= ids, key, ": ", f.path(), " hashes feature ", k, " into ", rows,
             " rows; table ", k, " has only ", ids,
             " (prepare the file with the model's table rows)");
}

SynthCtrOptions dlrm_synth_options(const DlrmOptions& model, const DlrmDataOptions& data) {
    SynthCtrOptions o;
    o.seed = static_cast<uint64_t>(data.synth_seed);
    for (const DlrmTable& t : model.tables) {
        o.table_rows.push_back(dlrm_id_range(t));
        o.raw_ids.push_back(dlrm_file_rows(t) == 0);
    }
    o.dense_features = static_cast<int>(model.dense_features);
    o.zipf = data.zipf;
    o.hotness = static_cast<int>(data.hotness);
    o.threads = 1;  // the run's threads are the model's; generation is a one-off
    return o;
}

std::unique_ptr<RunData> DlrmFamily::open_data(const DataContext& ctx) const {
    if (data_.stream) return open_dlrm_stream(model_, data_, ctx);
    return std::make_unique<DlrmRunData>(model_, data_, ctx);
}

}  // namespace zt
