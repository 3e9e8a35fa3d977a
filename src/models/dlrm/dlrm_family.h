// The DLRM family (docs/dlrm.md): the "model" section's DLRM keys, click-log data from the "data"
// section (generated with a hidden teacher, a prepared binary click file, or Criteo TSV converted
// when the run starts), the reference's weight names in safetensors, FLOPs per sample
// (Note [DLRM FLOPs]), an activation memory model (Note [DLRM activations]), and AUC and log loss
// over the held-out samples.
#pragma once

#include <memory>
#include <string>

#include "data/click/synth_ctr.h"
#include "models/dlrm/dlrm.h"
#include "models/family.h"
#include "util/config_section.h"

namespace zt {

// The "data" section of a DLRM run (docs/dlrm.md, Data).
struct DlrmDataOptions {
    std::string type = "synthetic";  // "synthetic", "ctr" (a prepared file) or "criteo_tsv"
    // synthetic: records generated from a seeded hidden teacher (data/click/synth_ctr.h)
    int64_t records = 200000;
    int64_t eval_records = 20000;
    int64_t synth_seed = 1234;
    double zipf = 1.05;
    int64_t hotness = 1;
    // ctr, criteo_tsv: files
    std::string path;
    std::string eval_path;
    double eval_fraction = 0.0;           // tail of `path` held out when there is no eval_path
    std::string on_bad_record = "fatal";  // criteo_tsv: "fatal" or "skip"
    bool shuffle = true;
    // ctr: `path` is a directory of parts that keep arriving (data/click/click_stream.h), trained
    // in arrival order; it ends when no part arrives for idle_timeout_s.
    bool stream = false;
    double idle_timeout_s = 10;
    int64_t progressive_window = 100000;  // stream: samples of progressive validation; 0 off
    // synthetic stream: `records` in parts of part_records, written by a thread of the run at
    // `rate` records/s (0: as fast as it can), the ids' popularity moving `drift` ranks a record.
    int64_t part_records = 8192;
    double rate = 0, drift = 0, teacher_drift = 0;
    // criteo_tsv stream: `path` a file that keeps growing or "-" (standard input), converted into
    // parts of part_records, a part also flush_s after its first line.
    double flush_s = 1.0;
};

// The synthetic teacher's options for a DLRM run's data (records and eval records aside): the
// model's tables' id ranges and dense features, one generator thread (the run's threads are the
// model's).
SynthCtrOptions dlrm_synth_options(const DlrmOptions& model, const DlrmDataOptions& data);

class CtrFile;
// Throws an input error (naming `key` and the file) unless table k of click file f fits model
// table t: ids below its id range, or raw 64-bit ids (rows_k 0) for a table with raw_ids.
void check_click_table(const CtrFile& f, int k, const DlrmTable& t, const std::string& key);

class DlrmFamily final : public ModelFamily {
  public:
    DlrmFamily(DlrmOptions model, DlrmDataOptions data);

    const DlrmOptions& options() const { return model_; }
    const DlrmDataOptions& data() const { return data_; }

    std::string name() const override { return "DLRM"; }
    std::string describe() const override;
    nlohmann::json describe_json() const override;
    std::unique_ptr<Model> build() const override;
    std::unique_ptr<RunData> open_data(const DataContext& ctx) const override;
    double flops_per_sample() const override;
    double module_flops(const Module& m, int64_t batch, bool root) const override;
    void export_weights(const std::string& path, std::span<const NamedTensorF32> params,
                        const std::string& dtype) const override;
    void import_weights(const std::string& path, std::span<NamedTensorF32> params) const override;
    // dlrm_compact.cpp: each table without its all-zero rows, and the id maps of those tables.
    CompactModel compact(std::span<const NamedTensorF32> params,
                         const std::string& weights_path) const override;
    int64_t param_count() const override { return dlrm_param_count(model_) - sparse_param_count(); }
    int64_t sparse_param_count() const override;
    std::vector<int64_t> param_numels(int t, const PipeStage& stage) const override;
    std::vector<GemmShape> gemm_shapes(int64_t B, int t) const override;
    // The tables in the arena (replicated, and dynamic ones) as lookups; the sharded ones as
    // sparse shapes (their machinery timed whole, planner/sparse_times.h).
    std::vector<LookupShape> lookup_shapes(int64_t B) const override;
    std::vector<SparseShape> sparse_shapes(int64_t B) const override;
    std::vector<InteractionShape> interaction_shapes(int64_t B) const override;
    int64_t sparse_bytes_per_rank(int ranks) const override;
    bool places_tables_by_weight(int ranks) const override;
    std::vector<int64_t> sparse_bytes_by_rank(int ranks,
                                              std::span<const double> weights) const override;
    std::vector<double> sparse_work_by_rank(int ranks,
                                            std::span<const double> weights) const override;
    void check_sparse_fit(int ranks, int64_t budget) const override;
    std::vector<PolicyActivations> activation_policies(int64_t B, DType dtype) const override;
    std::string activation_legend() const override;
    nlohmann::json activation_settings() const override;
    int64_t transient_workspace_bytes(int64_t B, DType grad_dtype, int threads,
                                      int64_t alignment) const override;
    bool evaluates_outputs() const override { return true; }
    nlohmann::json eval_metrics(std::span<const float> outputs,
                                std::span<const float> labels) const override;

  private:
    DlrmOptions model_;
    DlrmDataOptions data_;
};

// The family's sections: `model` (type "dlrm"), `data` and `embedding` (sharded tables); errors are
// recorded in the sections (Note [Config errors]). DLRM has no recompute regions: an
// activation_checkpointing policy other than "none" is an error.
std::shared_ptr<const DlrmFamily> parse_dlrm_family(config_detail::Section& model,
                                                    config_detail::Section& data,
                                                    config_detail::Section& embedding,
                                                    const std::string& checkpoint_policy);

// The DLRM family of a config (a checked downcast).
const DlrmFamily& as_dlrm(const ModelFamily& family);

}  // namespace zt
