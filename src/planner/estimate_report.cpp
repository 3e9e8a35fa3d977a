#include "planner/estimate_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "util/error.h"
#include "util/units.h"

namespace zt {

namespace {

const char* precision_name(DType d) {
    switch (d) {
        case DType::kF32:
            return "fp32";
        case DType::kBF16:
            return "bf16";
        case DType::kF16:
            return "fp16";
    }
    return "?";
}

std::string bytes_text(int64_t bytes) {
    return group_digits(bytes) + " B (" + format_bytes(static_cast<double>(bytes)) + ")";
}

std::string policy_label(const Estimate& est, const std::string& policy) {
    return est.spec.model->checkpoint_policy_label(policy);
}

std::string stage_name(int stage) { return stage == 0 ? "DDP (ZeRO-0)" : str_cat("ZeRO-", stage); }

void write_byte_model(std::ostringstream& os, const Estimate& est) {
    const StateSpec& st = est.spec.state;
    const int64_t g = static_cast<int64_t>(dtype_size(st.grad_dtype));
    os << "byte model (DESIGN.md, Memory model): Psi = parameters, N = data-parallel ranks, g = "
          "bytes per gradient element\n"
       << "  (4 when gradients accumulate in fp32, 2 with data_types.grad_accum_dtype bf16)\n"
       << "  mixed precision with Adam: 2Psi (bf16/fp16 weights) + gPsi (gradients) + 12Psi (fp32 "
          "master weights, m, v)\n"
       << "    DDP (14+g)Psi; ZeRO-1 (2+g)Psi + 12Psi/N; ZeRO-2 2Psi + (12+g)Psi/N; ZeRO-3 "
          "(14+g)Psi/N\n"
       << "  plain fp32 Adam (no separate master): DDP 16Psi; ZeRO-1 8Psi + 8Psi/N; ZeRO-2 4Psi "
          "+ 12Psi/N; ZeRO-3 16Psi/N\n"
       << "  SGD keeps 4 bytes of state per element with momentum, none without (in place of "
          "Adam's 8)\n";
    const int64_t value = std::llround(
        est.formula.bytes(static_cast<double>(st.param_count), static_cast<double>(st.ranks)));
    os << "  this run: " << stage_name(st.zero_stage) << ", " << est.formula.text
       << " with Psi = " << group_digits(st.param_count) << ", N = " << st.ranks << ", g = " << g
       << ": " << group_digits(value) << " B per rank (params + grads + optimizer)\n"
       << "  exact counts below pad the flat arena to a multiple of N (P = "
       << group_digits(est.state.padded_numel)
       << ", shard S = P/N = " << group_digits(est.state.shard_numel)
       << " elements) and round every buffer up to " << st.alignment
       << " bytes, as the tracked pool does\n";
    if (st.offload_optimizer)
        os << "  offload_optimizer " << (st.offload_nvme ? "nvme" : "cpu")
           << ": f32 master weights and optimizer state of the rank's range live "
           << (st.offload_nvme ? "in swap files on the NVMe disk" : "in host memory") << ", with "
           << st.offload_buffers << " staging buffers of sub_group_size "
           << group_digits(st.offload_sub_group) << " elements in host memory\n";
}

void write_buffers(std::ostringstream& os, const Estimate& est) {
    os << "\nmodel state per rank:\n";
    char line[200];
    std::snprintf(line, sizeof line, "  %-38s %14s %4s %16s  %-10s %s\n", "buffer", "elements",
                  "B/el", "bytes", "category", "where");
    os << line;
    for (const BufferEstimate& b : est.state.buffers) {
        std::snprintf(line, sizeof line, "  %-38s %14s %4lld %16s  %-10s %s\n", b.name.c_str(),
                      group_digits(b.numel).c_str(), static_cast<long long>(b.elem_bytes),
                      group_digits(b.bytes).c_str(), mem_category_name(b.category),
                      b.nvme   ? "nvme"
                      : b.host ? "host"
                               : "device");
        os << line;
    }
}

void write_categories(std::ostringstream& os, const Estimate& est) {
    os << "\nper-rank bytes by category (activations: policy "
       << policy_label(est, est.spec.model->checkpoint_policy())
       << (est.spec.pp > 1 ? ", peak of the micro-batches a stage holds in flight):\n"
                           : ", peak of one micro-batch):\n");
    char line[200];
    const bool nvme = est.nvme_total > 0;
    std::snprintf(line, sizeof line, "  %-13s %16s %12s   %16s %12s%s\n", "category", "device", "",
                  "host", "", nvme ? "   nvme" : "");
    os << line;
    auto row = [&](const char* name, int64_t dev, int64_t host, int64_t disk) {
        std::snprintf(line, sizeof line, "  %-13s %16s %12s   %16s %12s", name,
                      group_digits(dev).c_str(), format_bytes(static_cast<double>(dev)).c_str(),
                      group_digits(host).c_str(), format_bytes(static_cast<double>(host)).c_str());
        os << line;
        if (nvme) os << "   " << format_bytes(static_cast<double>(disk));
        os << "\n";
    };
    for (int c = 0; c < kMemCategoryCount; ++c)
        row(c == static_cast<int>(MemCategory::kComm)
                ? "comm buffers"
                : mem_category_name(static_cast<MemCategory>(c)),
            est.device[c], est.host[c], est.nvme[c]);
    row("total", est.device_total, est.host_total, est.nvme_total);
    const int ws = static_cast<int>(MemCategory::kWorkspace);
    os << "  workspace = " << group_digits(est.state.device[ws]) << " B held on the device + "
       << group_digits(est.workspace_transient)
       << " B scratch inside kernel calls (attention, cross-entropy, f32 gradient scratch)\n";
    const int stage = est.spec.state.zero_stage;
    if (est.spec.state.ranks > 1 || stage >= 1)
        os << "  comm buffers: "
           << (stage >= 2 ? "the gradient buckets the backward holds at once (the largest one "
                            "reducing, the next filling, one tied to the head) and a received "
                            "share"
                          : "one gradient bucket, the largest planned from reduce_bucket_size")
           << (stage == 3 ? "; the weights gathered: modules under "
                            "stage3_param_persistence_threshold, the largest held and "
                            "stage3_prefetch_bucket_size ahead"
                          : "")
           << " (docs/memory.md)\n";
}

void write_activations(std::ostringstream& os, const Estimate& est) {
    os << "\nactivations per micro-batch (B = " << est.spec.micro_batch << ", "
       << est.spec.model->activation_legend()
       << ", e = " << dtype_size(est.spec.state.compute_dtype)
       << " bytes), by activation_checkpointing.policy:\n";
    // The policy column as wide as its longest label (a per-block list names its runs).
    std::vector<std::string> labels;
    int width = 16;
    for (const PolicyActivations& p : est.policies) {
        labels.push_back(policy_label(est, p.policy));
        if (p.policy == est.spec.model->checkpoint_policy()) labels.back() += " *";
        width = std::max(width, static_cast<int>(labels.back().size()));
    }
    char line[200];
    std::snprintf(line, sizeof line, " %16s %12s %16s %12s\n", "kept", "", "peak", "");
    os << "  " << std::string("policy").append(static_cast<size_t>(width) - 6, ' ') << line;
    for (size_t i = 0; i < est.policies.size(); ++i) {
        const PolicyActivations& p = est.policies[i];
        std::snprintf(line, sizeof line, " %16s %12s %16s %12s\n", group_digits(p.saved).c_str(),
                      format_bytes(static_cast<double>(p.saved)).c_str(),
                      group_digits(p.peak).c_str(),
                      format_bytes(static_cast<double>(p.peak)).c_str());
        os << "  " << labels[i].append(static_cast<size_t>(width) - labels[i].size(), ' ') << line;
    }
    os << "  (* the config's policy; kept = live after forward; N = B T rows)\n"
       << "  per block kept with policy none: 18NCe + 16N + 4BHT; embeddings 3NCe; "
          "ln_f, logits, loss NCe + NVe + 16N; formulas per policy in docs/memory.md\n";
}

}  // namespace

std::string group_digits(int64_t n) {
    std::string digits = std::to_string(n < 0 ? -n : n);
    std::string out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return n < 0 ? "-" + out : out;
}

const char* offload_name(const StateSpec& st) {
    return !st.offload_optimizer ? "none" : st.offload_nvme ? "nvme" : "cpu";
}

std::string estimate_text(const Estimate& est, const std::string& source) {
    const StateSpec& st = est.spec.state;
    std::ostringstream os;
    os << "zerotrain estimate: " << source << "\n"
       << "model: " << est.spec.model->describe() << ": Psi = " << group_digits(st.param_count)
       << " parameters"
       << (est.spec.tp > 1 ? str_cat(" per rank of parallel.tensor = ", est.spec.tp,
                                     est.spec.sequence_parallel ? " with sequence_parallel" : "",
                                     " (activations: one rank's)")
                           : std::string())
       << (est.spec.pp > 1 ? str_cat(" on the most loaded of parallel.pipeline = ", est.spec.pp,
                                     " stages (each figure the largest over the stages; each "
                                     "stage's at the end)")
                           : std::string())
       << "\n"
       << "run: " << precision_name(st.compute_dtype) << ", gradients "
       << precision_name(st.grad_dtype) << ", " << est.spec.optimizer << ", "
       << stage_name(st.zero_stage) << ", N = " << st.ranks << " ranks, micro-batch "
       << est.spec.micro_batch << ", offload_optimizer " << offload_name(st) << "\n\n";
    write_byte_model(os, est);
    write_buffers(os, est);
    write_categories(os, est);
    write_activations(os, est);
    os << "\nper-rank device peak, at most: " << bytes_text(est.device_total);
    if (est.host_total > 0) os << "; host: " << bytes_text(est.host_total);
    if (est.nvme_total > 0) os << "; nvme: " << bytes_text(est.nvme_total);
    os << "\n";
    return os.str();
}

nlohmann::json estimate_json(const Estimate& est, const std::string& source) {
    using nlohmann::json;
    const StateSpec& st = est.spec.state;
    const ModelFamily& m = *est.spec.model;
    auto categories = [](const CategoryBytes& c) {
        json j = json::object();
        int64_t total = 0;
        for (int i = 0; i < kMemCategoryCount; ++i) {
            j[mem_category_name(static_cast<MemCategory>(i))] = c[i];
            total += c[i];
        }
        j["total"] = total;
        return j;
    };
    json buffers = json::array();
    for (const BufferEstimate& b : est.state.buffers)
        buffers.push_back({{"name", b.name},
                           {"category", mem_category_name(b.category)},
                           {"where", b.nvme   ? "nvme"
                                     : b.host ? "host"
                                              : "device"},
                           {"numel", b.numel},
                           {"elem_bytes", b.elem_bytes},
                           {"bytes", b.bytes}});
    json policies = json::object();
    for (const PolicyActivations& p : est.policies)
        policies[p.policy] = {{"saved", p.saved}, {"peak", p.peak}};
    json activations = {{"micro_batch", est.spec.micro_batch},
                        {"dtype", precision_name(st.compute_dtype)},
                        {"policy", m.checkpoint_policy()},
                        {"policies", policies}};
    activations.update(m.activation_settings());
    return {
        {"source", source},
        {"model", m.describe_json()},
        {"param_count", st.param_count},
        {"padded_numel", est.state.padded_numel},
        {"shard_numel", est.state.shard_numel},
        {"ranks", st.ranks},
        {"tensor", est.spec.tp},
        {"pipeline", est.spec.pp},
        {"zero_stage", st.zero_stage},
        {"precision", precision_name(st.compute_dtype)},
        {"grad_accum_dtype", precision_name(st.grad_dtype)},
        {"g", dtype_size(st.grad_dtype)},
        {"optimizer", est.spec.optimizer},
        {"offload_optimizer", st.offload_optimizer ? "cpu" : "none"},
        {"alignment", st.alignment},
        {"formula",
         {{"text", est.formula.text},
          {"replicated_bytes_per_param", est.formula.replicated},
          {"sharded_bytes_per_param", est.formula.sharded},
          {"bytes",
           est.formula.bytes(static_cast<double>(st.param_count), static_cast<double>(st.ranks))}}},
        {"buffers", buffers},
        {"device", categories(est.device)},
        {"host", categories(est.host)},
        {"nvme", categories(est.nvme)},
        {"workspace",
         {{"held", est.state.device[static_cast<int>(MemCategory::kWorkspace)] +
                       est.state.host[static_cast<int>(MemCategory::kWorkspace)]},
          {"transient", est.workspace_transient}}},
        {"activations", activations},
    };
}

}  // namespace zt
