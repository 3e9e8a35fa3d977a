// compression.pruning, compression.quantization and compression.gradients (config_compression.h;
// docs/pruning.md, docs/quantization.md, docs/compression.md).
#include "runtime/config_compression.h"

#include <climits>
#include <utility>

#include "models/dlrm/dlrm_family.h"
#include "models/family.h"
#include "runtime/config.h"

namespace zt::config_detail {

namespace {

// structured (docs/pruning.md): "heads" and "channels", the fractions of each layer's units
// pruned at end_step; "final_sparsity" sets both. Each below 1: every layer keeps a head and a
// channel. The targets are fixed (every head and channel), so "params" is refused.
void parse_structured(Section& s, PruningOptions& p, const TrainConfig& c) {
    for (const char* k : {"initial_sparsity", "scope", "params", "n", "m"})
        ZT_CHECK(!s.has(k), s.key(k),
                 ": not used by structured pruning (it prunes the same fraction of every "
                 "layer's heads and channels, from 0 at start_step); remove it");
    const double both = s.get_number("final_sparsity", 0.0, 0.0, 1.0);
    p.heads = s.get_number("heads", both, 0.0, 1.0);
    p.channels = s.get_number("channels", both, 0.0, 1.0);
    ZT_CHECK(p.heads > 0.0 || p.channels > 0.0, s.key("heads"),
             ": structured pruning needs a fraction of heads or channels to prune (\"heads\": "
             "0.3, \"channels\": 0.3, or \"final_sparsity\": 0.3 for both)");
    for (const auto& [k, v] : {std::pair{"heads", p.heads}, std::pair{"channels", p.channels}})
        ZT_CHECK(v < 1.0, s.key(k),
                 ": expected a fraction below 1 (every layer keeps at least one head and one "
                 "channel), got ",
                 v);
    ZT_CHECK(c.model && c.model->name() == "GPT", s.key("type"),
             ": structured pruning prunes GPT's attention heads and MLP channels; this model is ",
             c.model ? c.model->name() : std::string("unknown"),
             "; use \"magnitude\" or \"nm\", or \"rows\" for DLRM's embedding rows by lookup "
             "count");
}

// rows (docs/pruning.md): DLRM's embedding rows with the fewest lookups; "final_sparsity" (and
// "initial_sparsity") are fractions of each table's rows. The tables must be parameters of the
// arena: sharded and dynamic tables (the "embedding" section) keep their rows elsewhere.
void parse_rows(Section& s, const TrainConfig& c) {
    for (const char* k : {"scope", "params", "n", "m"})
        ZT_CHECK(!s.has(k), s.key(k),
                 ": not used by rows pruning (it prunes the same fraction of every table's rows, "
                 "the least looked-up first); remove it");
    ZT_CHECK(c.model && c.model->name() == "DLRM", s.key("type"),
             ": rows pruning prunes DLRM's embedding rows by lookup count; this model is ",
             c.model ? c.model->name() : std::string("unknown"),
             "; use \"magnitude\", \"nm\" or \"structured\"");
    ZT_CHECK(!as_dlrm(*c.model).options().embedding.enabled, s.key("type"),
             ": rows pruning of tables placed by the \"embedding\" section (sharded or dynamic) "
             "is not supported yet; remove the \"embedding\" section so the tables are dense "
             "parameters (replicated, ZeRO-partitioned)");
}

void parse_pruning(Section& s, PruningOptions& p, const TrainConfig& c) {
    const std::string type =
        s.get_choice("type", "magnitude", {"magnitude", "nm", "structured", "rows"});
    p.type = type;
    p.start_step = s.get_int("start_step", 1, 1);
    p.end_step = s.get_int("end_step", p.start_step, p.start_step);
    p.frequency = s.get_int("frequency", 1, 1);
    if (type == "structured") {
        parse_structured(s, p, c);
    } else {
        for (const char* k : {"heads", "channels"})
            ZT_CHECK(!s.has(k), s.key(k), ": only \"type\": \"structured\" prunes whole heads ",
                     "and channels; remove it or use that type");
    }
    if (const json* v = type == "structured" || type == "rows" ? nullptr : s.take("params")) {
        ZT_CHECK(v->is_array(), s.key("params"),
                 ": expected a list of parameter-name parts (\"attn\", \"mlp\"), got ", show(*v));
        for (const json& x : *v) p.params.push_back(as_string(x, s.key("params")));
    }
    if (type == "rows") parse_rows(s, c);
    if (type == "magnitude" || type == "rows") {
        ZT_CHECK(s.has("final_sparsity"), s.key("final_sparsity"),
                 ": required for magnitude and rows pruning (the fraction of weights or of each "
                 "table's rows pruned at end_step, for example 0.3)");
        p.final_sparsity = s.get_number("final_sparsity", 0.0, 0.0, 1.0);
        ZT_CHECK(p.final_sparsity < 1.0, s.key("final_sparsity"),
                 ": expected a number below 1 (1 prunes every weight), got ", p.final_sparsity);
        p.initial_sparsity = s.get_number("initial_sparsity", 0.0, 0.0, p.final_sparsity);
        if (type == "magnitude") p.scope = s.get_choice("scope", "global", {"global", "layer"});
    } else if (type == "nm") {
        p.n = static_cast<int>(s.get_int("n", 2, 1, INT_MAX));
        p.m = static_cast<int>(s.get_int("m", 4, 2, INT_MAX));
        ZT_CHECK(p.n < p.m, s.key("n"), ": expected fewer than m = ", p.m, " (n of every m ",
                 "weights are kept), got ", p.n);
        for (const char* k : {"final_sparsity", "initial_sparsity", "scope"})
            ZT_CHECK(!s.has(k), s.key(k), ": not used by N:M pruning (its sparsity is 1 - n/m); ",
                     "remove it");
    }
    s.finish();
    ZT_CHECK(type != "rows" || (c.tp == 1 && !c.pipe.active()), s.key("type"),
             ": \"rows\" with parallel.tensor or parallel.pipeline is not supported (DLRM "
             "trains with data parallelism and sharded tables)");
}

// "weights" and "activations": a format, or "none".
void parse_quantization(Section& s, QatOptions& q) {
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
}

// compression.gradients "powersgd": rank-r factors (comm/powersgd.h) instead of a codec.
void parse_powersgd(Section& s, GradCompressionOptions& g) {
    g.powersgd.enabled = true;
    g.powersgd.rank = static_cast<int>(s.get_int("rank", 4, 1));
    g.powersgd.warm_start = s.get_bool("warm_start", true);
    g.powersgd.min_compression_rate = s.get_number("min_compression_rate", 2.0, 1.0, 1e9);
}

// compression.gradients (docs/compression.md): the codec of the data-parallel gradient
// reductions. Error feedback defaults on where the codec drops most of the signal (top-k, int4,
// onebit, powersgd).
void parse_gradients(Section& s, GradCompressionOptions& g, const TrainConfig& c,
                     std::vector<std::string>& warnings) {
    // "fp8" is fp8_e4m3, as in comm_precision (comm/comm_precision.h) and DeepSpeed's names.
    std::string type = s.get_choice("type", "int8",
                                    {"f32", "bf16", "fp16", "int8", "int4", "fp8", "fp8_e4m3",
                                     "fp8_e5m2", "topk", "onebit", "powersgd"});
    if (type == "fp8") type = "fp8_e4m3";
    g.enabled = true;
    if (type == "powersgd") {
        parse_powersgd(s, g);
    } else {
        g.codec.kind = parse_codec_kind(type);
        for (const char* k : {"rank", "warm_start", "min_compression_rate"})
            ZT_CHECK(!s.has(k), s.key(k), ": only \"powersgd\" has it; remove it for \"", type,
                     "\"");
    }
    const bool blockwise =
        type == "int8" || type == "int4" || type.rfind("fp8", 0) == 0 || type == "onebit";
    if (blockwise)
        g.codec.block = s.get_int("block", 256, 1);
    else
        ZT_CHECK(!s.has("block"), s.key("block"),
                 ": only the blockwise types (int8, int4, "
                 "fp8_e4m3, fp8_e5m2, onebit) have blocks; remove it for \"",
                 type, "\"");
    if (type == "topk")
        g.codec.ratio = s.get_number("ratio", 0.01, 1e-9, 1.0);
    else
        ZT_CHECK(!s.has("ratio"), s.key("ratio"),
                 ": only \"topk\" keeps a ratio; remove it "
                 "for \"",
                 type, "\"");
    g.error_feedback = s.get_bool("error_feedback", type == "topk" || type == "int4" ||
                                                        type == "onebit" || type == "powersgd");
    // The first start_step optimizer steps reduce uncompressed (Note [Uncompressed warm-up] in
    // parallel/grad_transport.cpp).
    g.start_step = s.get_int("start_step", 0, 0);
    s.finish();
    if (g.start_step >= c.steps)
        warnings.push_back(str_cat(s.key("start_step"), ": ", g.start_step, " >= steps (", c.steps,
                                   "): no step of this run is compressed"));
    ZT_CHECK(c.communication_data_type == c.grad_accum_dtype, s.key("type"),
             ": communication_data_type \"", c.communication_data_type,
             "\" and compression.gradients both choose how gradients travel; remove "
             "communication_data_type (compression.gradients \"bf16\" or \"fp16\" casts)");
    if (c.dp == 1)
        warnings.push_back(str_cat(s.key("type"),
                                   ": one data-parallel rank reduces no "
                                   "gradients, so nothing is compressed"));
}

}  // namespace

void parse_compression(Section& root, TrainConfig& c, std::vector<std::string>& warnings) {
    Section s = root.section("compression");
    Section pruning = s.section("pruning");
    if (!pruning.empty()) parse_pruning(pruning, c.pruning, c);
    Section quant = s.section("quantization");
    if (!quant.empty()) parse_quantization(quant, c.quantization);
    Section grads = s.section("gradients");
    if (!grads.empty()) parse_gradients(grads, c.grad_compression, c, warnings);
    s.finish();
    if (c.zero.quantized_gradients) {  // ZeRO++'s qgZ: 4-bit blockwise gradients
        ZT_CHECK(!c.grad_compression.enabled,
                 "zero_optimization.zero_quantized_gradients and compression.gradients both "
                 "choose the gradients' codec; keep one");
        c.grad_compression.enabled = true;
        c.grad_compression.codec = {CodecKind::kInt4, 256, 0};
        c.grad_compression.error_feedback = true;
    }
}

}  // namespace zt::config_detail
