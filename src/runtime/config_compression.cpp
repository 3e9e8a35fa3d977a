// compression.pruning and compression.quantization (config_compression.h; docs/pruning.md,
// docs/quantization.md).
#include "runtime/config_compression.h"

#include <climits>

#include "runtime/config.h"

namespace zt::config_detail {

namespace {

void parse_pruning(Section& s, PruningOptions& p, const TrainConfig& c) {
    const std::string type = s.get_choice("type", "magnitude", {"magnitude", "nm", "structured"});
    ZT_CHECK(type != "structured", s.key("type"),
             ": structured pruning (heads, channels) is not supported yet; use \"magnitude\" "
             "or \"nm\"");
    p.type = type;
    p.start_step = s.get_int("start_step", 1, 1);
    p.end_step = s.get_int("end_step", p.start_step, p.start_step);
    p.frequency = s.get_int("frequency", 1, 1);
    if (const json* v = s.take("params")) {
        ZT_CHECK(v->is_array(), s.key("params"),
                 ": expected a list of parameter-name parts (\"attn\", \"mlp\"), got ", show(*v));
        for (const json& x : *v) p.params.push_back(as_string(x, s.key("params")));
    }
    if (type == "magnitude") {
        ZT_CHECK(s.has("final_sparsity"), s.key("final_sparsity"),
                 ": required for magnitude pruning (the fraction of weights pruned at end_step, "
                 "for example 0.3)");
        p.final_sparsity = s.get_number("final_sparsity", 0.0, 0.0, 1.0);
        ZT_CHECK(p.final_sparsity < 1.0, s.key("final_sparsity"),
                 ": expected a number below 1 (1 prunes every weight), got ", p.final_sparsity);
        p.initial_sparsity = s.get_number("initial_sparsity", 0.0, 0.0, p.final_sparsity);
        p.scope = s.get_choice("scope", "global", {"global", "layer"});
    } else {
        p.n = static_cast<int>(s.get_int("n", 2, 1, INT_MAX));
        p.m = static_cast<int>(s.get_int("m", 4, 2, INT_MAX));
        ZT_CHECK(p.n < p.m, s.key("n"), ": expected fewer than m = ", p.m, " (n of every m ",
                 "weights are kept), got ", p.n);
        for (const char* k : {"final_sparsity", "initial_sparsity", "scope"})
            ZT_CHECK(!s.has(k), s.key(k), ": not used by N:M pruning (its sparsity is 1 - n/m); ",
                     "remove it");
    }
    s.finish();
    ZT_CHECK(c.tp == 1 && !c.pipe.active(), s.key("type"),
             ": pruning with parallel.tensor or parallel.pipeline is not supported yet (a mask "
             "update would need the weights of every part); use data parallelism and ZeRO");
}

// "weights" and "activations": a format, or "none".
void parse_quantization(Section& s, QatOptions& q, const TrainConfig& c) {
    q.enabled = true;
    auto format = [&](const char* k, bool& on, QuantFormat& f) {
        const std::string v = s.get_choice(k, "int8", {"int8", "fp8_e4m3", "fp8_e5m2", "none"});
        on = v != "none";
        if (on) f = parse_quant_format(v);
    };
    format("weights", q.weights, q.weight_format);
    format("activations", q.inputs, q.input_format);
    ZT_CHECK(q.weights || q.inputs, s.key("weights"),
             ": quantization with neither weights nor activations does nothing; give a format "
             "for one of them, or remove compression.quantization");
    q.start_step = s.get_int("start_step", 1, 1);
    q.clip = static_cast<float>(s.get_number("clip", 1.0, 0.0, 1.0));
    ZT_CHECK(q.clip > 0.0f, s.key("clip"), ": expected a number in (0, 1], got 0");
    if (const json* v = s.take("params")) {
        ZT_CHECK(v->is_array(), s.key("params"),
                 ": expected a list of parameter-name parts (\"attn\", \"mlp\"), got ", show(*v));
        for (const json& x : *v) q.params.push_back(as_string(x, s.key("params")));
    }
    s.finish();
    ZT_CHECK(c.tp == 1 && !c.pipe.active(), s.key("weights"),
             ": quantization-aware training with parallel.tensor or parallel.pipeline is not "
             "supported yet (a row-parallel part sees part of each row); use data parallelism "
             "and ZeRO");
}

}  // namespace

void parse_compression(Section& root, TrainConfig& c) {
    Section s = root.section("compression");
    Section pruning = s.section("pruning");
    if (!pruning.empty()) parse_pruning(pruning, c.pruning, c);
    Section quant = s.section("quantization");
    if (!quant.empty()) parse_quantization(quant, c.quantization, c);
    s.finish();
}

}  // namespace zt::config_detail
