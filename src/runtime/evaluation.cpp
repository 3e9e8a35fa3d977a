#include "runtime/evaluation.h"

#include <cmath>

namespace zt {

namespace {

// Note [Evaluation]: the mean loss over eval_iters batches, plus the family's metrics of the
// model's outputs (DLRM: AUC and log loss). Ranks share the batches (rank r takes r, r + N, ...);
// every rank runs the same number of forwards, since ZeRO-3 gathers parameters collectively, and
// a rank's surplus forward counts nothing. Outputs travel to every rank in one all-gather of
// equal counts (rounds x micro-batch samples per rank, surplus marked by a NaN label).
nlohmann::json evaluate_once(Engine& engine, RunData& data, const TrainConfig& cfg,
                             Communicator* comm, PipelineStep* pipe) {
    ZeroDataParallel& dp = engine.data_parallel();
    const int64_t N = dp.ranks();
    const int64_t rounds = (cfg.eval_iters + N - 1) / N;
    const bool outputs = cfg.model->evaluates_outputs();
    std::vector<float> out, labels;
    double sum = 0;
    for (int64_t i = 0; i < rounds; ++i) {
        const int64_t it = i * N + dp.rank();
        const Batch batch =
            data.eval_batch((it < cfg.eval_iters ? it : 0) * cfg.micro_batch, cfg.micro_batch);
        const size_t before = labels.size();
        const double loss = pipe      ? pipe->eval_loss(batch)
                            : outputs ? engine.eval_loss(batch, &out, &labels)
                                      : engine.eval_loss(batch);
        ZT_ASSERT(out.size() == labels.size(), "evaluate: outputs and labels differ in count");
        if (it < cfg.eval_iters) {
            sum += loss;
        } else {
            for (size_t k = before; k < labels.size(); ++k) labels[k] = NAN;
        }
    }
    nlohmann::json j = {
        {"eval_loss", dp.sum_over_ranks(sum) / static_cast<double>(cfg.eval_iters)}};
    if (!outputs) return j;
    std::vector<float> all_out = out, all_labels = labels;
    if (comm && N > 1) {
        const std::vector<int64_t> counts(static_cast<size_t>(N), static_cast<int64_t>(out.size()));
        all_out.assign(out.size() * static_cast<size_t>(N), 0.0f);
        all_labels.assign(all_out.size(), 0.0f);
        comm->all_gather(out.data(), all_out.data(), counts, CommType::kF32)->wait();
        comm->all_gather(labels.data(), all_labels.data(), counts, CommType::kF32)->wait();
    }
    size_t kept = 0;
    for (size_t k = 0; k < all_labels.size(); ++k)
        if (!std::isnan(all_labels[k])) {
            all_out[kept] = all_out[k];
            all_labels[kept++] = all_labels[k];
        }
    all_out.resize(kept);
    all_labels.resize(kept);
    j.update(cfg.model->eval_metrics(all_out, all_labels));
    return j;
}

}  // namespace

nlohmann::json evaluate(Engine& engine, RunData& data, const TrainConfig& cfg, Communicator* comm,
                        PipelineStep* pipe) {
    nlohmann::json j = evaluate_once(engine, data, cfg, comm, pipe);
    if (!engine.quantizing()) return j;
    engine.pause_quantization(true);
    const nlohmann::json full = evaluate_once(engine, data, cfg, comm, pipe);
    engine.pause_quantization(false);
    for (const auto& [k, v] : full.items()) j[k + "_full_precision"] = v;
    return j;
}

}  // namespace zt
