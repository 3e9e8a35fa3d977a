#include "models/dlrm/dlrm_stream_data.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "data/click/click_dataset.h"
#include "data/click/click_stream.h"
#include "data/click/criteo_tsv_stream.h"
#include "data/click/synth_ctr_stream.h"
#include "util/error.h"
#include "util/temp_files.h"

namespace zt {

namespace {

namespace fs = std::filesystem;

double wall_now_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// A stream the run produces itself, in a thread, into a temporary directory removed with the run
// data: data.type "synthetic" generates the parts at data.rate as a log shipper would deliver
// them (synth_ctr_stream.h); "criteo_tsv" converts the lines of a file that keeps growing, or of
// standard input ("-"), into parts as they arrive (criteo_tsv_stream.h).
class StreamProducer {
  public:
    StreamProducer(const DlrmOptions& model, const DlrmDataOptions& dc) {
        dir_.path = make_temp_path("stream");  // Note [Orphaned temporary files]
        fs::create_directories(parts());       // removed by dir_ also when this constructor throws
        std::vector<int64_t> rows;
        for (const DlrmTable& t : model.tables) rows.push_back(dlrm_file_rows(t));
        std::function<void()> produce;
        if (dc.type == "synthetic") {
            SynthStreamOptions o;
            SynthCtrOptions& r = o.records;
            r = dlrm_synth_options(model, dc);
            r.drift = dc.drift;
            r.teacher_drift = dc.teacher_drift;
            o.records_per_file = dc.part_records;
            o.files = (dc.records + dc.part_records - 1) / dc.part_records;
            o.rate = dc.rate;
            o.cancel = &cancel_;
            if (dc.eval_records > 0) {  // held out from the stream's start
                SynthCtrOptions e = r;
                e.records = 1;  // write_synth_ctr needs a training file: one record, removed
                e.eval_records = dc.eval_records;
                write_synth_ctr(e, dir_.path + "/eval.train", dir_.path + "/eval.ctr");
                fs::remove(dir_.path + "/eval.train");
            }
            produce = [o, d = parts()] { write_synth_stream(o, d); };
        } else {
            ZT_CHECK(model.dense_features == kCriteoDense &&
                         model.tables.size() == static_cast<size_t>(kCriteoCategorical),
                     "data.type \"criteo_tsv\": Criteo lines have ", kCriteoDense,
                     " dense features and ", kCriteoCategorical,
                     " categorical ones; the model has ", model.dense_features, " and ",
                     model.tables.size(), " tables");
            TsvStreamOptions o;
            o.in = dc.path;
            o.dir = parts();
            o.table_rows = rows;
            o.on_bad = dc.on_bad_record == "skip" ? BadRecord::kSkip : BadRecord::kFatal;
            o.part_records = dc.part_records;
            o.flush_s = dc.flush_s;
            o.follow = dc.path != "-";  // a file keeps growing; standard input ends
            o.cancel = &cancel_;
            if (!dc.eval_path.empty())  // a TSV file too: converted once, now
                convert_criteo_tsv(dc.eval_path, dir_.path + "/eval.ctr", rows, o.on_bad);
            produce = [o] { stream_criteo_tsv(o); };
        }
        thread_ = std::thread([this, produce] {
            try {
                produce();
            } catch (...) {
                error_ = std::current_exception();
            }
        });
    }
    ~StreamProducer() {
        cancel_ = true;
        thread_.join();
    }
    StreamProducer(const StreamProducer&) = delete;
    StreamProducer& operator=(const StreamProducer&) = delete;
    std::string parts() const { return dir_.path + "/parts"; }
    std::string eval() const {
        return fs::exists(dir_.path + "/eval.ctr") ? dir_.path + "/eval.ctr" : "";
    }
    void rethrow() const {
        if (error_) std::rethrow_exception(error_);
    }

  private:
    struct RemovedDir {  // the temporary directory, removed with the producer
        std::string path;
        ~RemovedDir() {
            std::error_code ec;
            if (!path.empty()) fs::remove_all(path, ec);
        }
    };
    RemovedDir dir_;
    std::atomic<bool> cancel_{false};
    std::exception_ptr error_;
    std::thread thread_;
};

// The producer (streams the run makes itself) starts before the stream reads its directory.
std::unique_ptr<StreamProducer> start_producer(const DlrmOptions& model,
                                               const DlrmDataOptions& dc) {
    if (dc.type == "ctr") return nullptr;  // parts a shipper delivers
    return std::make_unique<StreamProducer>(model, dc);
}

class DlrmStreamData final : public RunData {
  public:
    DlrmStreamData(const DlrmOptions& model, const DlrmDataOptions& dc)
        : model_(model),
          producer_(start_producer(model, dc)),
          stream_(ClickStreamOptions{producer_ ? producer_->parts() : dc.path, dc.idle_timeout_s}),
          progressive_window_(dc.progressive_window) {
        const std::string eval_path = producer_ ? producer_->eval() : dc.eval_path;
        if (!eval_path.empty()) {
            std::shared_ptr<const CtrFile> f = CtrFile::open(eval_path);
            check_layout(*f, "data.eval_path");
            ClickDatasetOptions o;
            o.shuffle = false;
            eval_ = std::make_unique<ClickDataset>(f, o);
        }
        check_new_parts();
    }

    Batch train_batch(int64_t k0, int64_t count) override {
        if (peeked_k0_ == k0 && peeked_count_ == count) {
            std::swap(train_buf_, peek_buf_);  // decoded already (peek_train)
        } else {
            stream_.fill(k0, count, train_buf_);
            index_distinct_ids(train_buf_);
        }
        peeked_k0_ = -1;
        return click_batch(train_buf_, train_click_);
    }
    // Note [Stream read-ahead]: the next micro-batch, for a model that reads its rows ahead
    // (embedding.tier), when its records are in parts already opened. A peek never waits and
    // never lists the directory: whether more records arrived is agreed over the ranks once a
    // step (wait_for_train), and a new part's layout is checked there before anything reads it.
    // Within a part every micro-batch is known ahead; the first micro-batch of a part that was
    // not yet opened goes without read-ahead. The decoded batch is kept for its train_batch.
    std::optional<Batch> peek_train(int64_t k0, int64_t count) override {
        if (checked_ < stream_.parts() || k0 + count > stream_.records()) return std::nullopt;
        stream_.fill(k0, count, peek_buf_);
        index_distinct_ids(peek_buf_);
        peeked_k0_ = k0;
        peeked_count_ = count;
        return click_batch(peek_buf_, peek_click_);
    }
    bool has_eval() const override { return eval_ != nullptr; }
    int64_t progressive_window() const override { return progressive_window_; }
    Batch eval_batch(int64_t k0, int64_t count) override {
        eval_->fill(k0, count, eval_buf_);
        return click_batch(eval_buf_, eval_click_);
    }
    std::vector<std::string> notes() const override {
        return {str_cat("click stream ", stream_.dir(), ": ", stream_.parts(), " parts (",
                        stream_.records(), " records) so far; trained in arrival order")};
    }
    nlohmann::json counters() const override {
        nlohmann::json s = {{"records_arrived", stream_.records()},
                            {"parts", stream_.parts()},
                            {"records_waiting", stream_.records() - wanted_}};
        if (freshness_s_ >= 0) s["freshness_s"] = freshness_s_;
        return {{"unique_ids", train_buf_.unique_ids}, {"stream", s}};
    }
    bool is_stream() const override { return true; }
    bool wait_for_train(int64_t end) override {
        const bool ok = stream_.wait_for(end);
        if (producer_) producer_->rethrow();
        check_new_parts();
        if (ok) wanted_ = end;
        return ok;
    }
    // The records of this checkpoint that were not in the last: the first of them has waited
    // longest for a saved model that learned from it.
    void saved(int64_t end) override {
        if (end <= saved_end_) return;
        freshness_s_ = wall_now_s() - stream_.arrival(saved_end_);
        saved_end_ = end;
    }

  private:
    void check_layout(const CtrFile& f, const char* key) const {
        ZT_CHECK(f.dense_features() == model_.dense_features &&
                     f.tables() == static_cast<int>(model_.tables.size()),
                 key, ": ", f.path(), " has ", f.dense_features(), " dense features and ",
                 f.tables(), " tables; the model has ", model_.dense_features, " and ",
                 model_.tables.size());
        for (int k = 0; k < f.tables(); ++k)
            check_click_table(f, k, model_.tables[static_cast<size_t>(k)], key);
    }
    void check_new_parts() {
        for (; checked_ < stream_.parts(); ++checked_)
            check_layout(stream_.part(checked_), "data.path");
    }

    DlrmOptions model_;
    std::unique_ptr<StreamProducer> producer_;
    ClickStream stream_;
    std::unique_ptr<ClickDataset> eval_;
    ClickBatchBuffers train_buf_, eval_buf_, peek_buf_;
    ClickBatch train_click_, eval_click_, peek_click_;
    int64_t peeked_k0_ = -1, peeked_count_ = 0;  // what peek_buf_ holds (-1: nothing)
    int64_t checked_ = 0;                        // parts whose layout was checked
    int64_t wanted_ = 0;                         // samples [0, wanted_) have been waited for
    int64_t saved_end_ = 0;                      // samples in the last checkpoint
    double freshness_s_ = -1;                    // the last checkpoint's; -1 before one
    int64_t progressive_window_;
};

}  // namespace

std::unique_ptr<RunData> open_dlrm_stream(const DlrmOptions& model, const DlrmDataOptions& data,
                                          const DataContext& ctx) {
    ZT_CHECK(data.path != "-" || ctx.ranks == 1, "data.path \"-\": standard input reaches one ",
             "process, and this run has ", ctx.ranks, " data-parallel ranks; append the lines to ",
             "a file (it may keep growing) or deliver ZTCLICK parts into a directory");
    return std::make_unique<DlrmStreamData>(model, data);
}

}  // namespace zt
