// The "optimizer" and "scheduler" sections (config_optimizer.h).
#include "runtime/config_optimizer.h"

#include <cctype>
#include <set>

#include "optim/onebit_adam.h"
#include "runtime/config.h"

namespace zt::config_detail {

using nlohmann::json;

void warn_no_effect(Section& s, const char* k, const char* why,
                    std::vector<std::string>& warnings) {
    if (!s.has(k)) {
        s.take(k);  // null: absent
        return;
    }
    s.get_bool(k, false);
    warnings.push_back(str_cat(s.key(k), ": has no effect in zerotrain (", why, ")"));
}

std::string to_lower(std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
}

namespace {

// Keys that belong to one optimizer (or scheduler) and are an error under another, as DeepSpeed's
// constructor call would be; truly unknown keys are warnings.
void refuse_foreign(Section& p, std::initializer_list<const char*> keys, const std::string& owner) {
    for (const char* k : keys)
        ZT_CHECK(!p.take(k), p.key(k), ": not a parameter of ", owner, "; remove it");
}

// optimizer.params.betas: two numbers in [0, 1) ([0, 1] with `closed`, as Lion allows).
void parse_betas(Section& p, OptimizerConfig& o, bool closed = false) {
    if (const json* b = p.take("betas")) {
        p.guard([&] {
            if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number())
                fail_type(p.key("betas"), "two numbers [beta1, beta2]", *b);
            const double b1 = (*b)[0].get<double>(), b2 = (*b)[1].get<double>();
            auto in = [&](double x) { return x >= 0 && (closed ? x <= 1 : x < 1); };
            ZT_CHECK(in(b1) && in(b2), p.key("betas"), ": expected values in [0, 1",
                     closed ? "]" : ")", ", got ", show(*b));
            o.beta1 = b1;
            o.beta2 = b2;
        });
    }
}

void parse_adam(Section& p, const std::string& type, OptimizerConfig& o,
                std::vector<std::string>& warnings) {
    parse_betas(p, o);
    o.eps = p.get_number("eps", o.eps, 0.0);
    o.bias_correction = p.get_bool("bias_correction", true);
    bool adam_w_mode = p.get_bool("adam_w_mode", true);
    ZT_CHECK(!p.get_bool("amsgrad", false), p.key("amsgrad"),
             ": AMSGrad is not supported yet; remove it or set it to false");
    warn_no_effect(p, "torch_adam",
                   "it picks DeepSpeed's or PyTorch's implementation; zerotrain's follows "
                   "PyTorch's op order either way",
                   warnings);
    ZT_CHECK(type == "adam" || adam_w_mode, p.key("adam_w_mode"),
             ": false contradicts \"type\": \"AdamW\"; use \"type\": \"Adam\" for Adam with L2");
    o.type = adam_w_mode ? "AdamW" : "Adam";
}

// Keys of Adam/AdamW alone, refused under the other optimizers.
constexpr std::initializer_list<const char*> kAdamOnly = {"adam_w_mode", "bias_correction",
                                                          "amsgrad", "torch_adam"};

// DeepSpeed's OnebitAdam parameters and defaults (optim/onebit_adam.h). Its update has no bias
// correction, whatever bias_correction says (DeepSpeed's ignores it too).
void parse_onebit_adam(Section& p, OptimizerConfig& o, std::vector<std::string>& warnings) {
    refuse_foreign(p, {"adam_w_mode", "torch_adam"}, "OneBitAdam");
    parse_betas(p, o);
    o.eps = p.get_number("eps", o.eps, 0.0);
    o.freeze_step = p.get_int("freeze_step", 100000, 0);
    // zerotrain's own: what the compressed phase exchanges (Note [Update exchange])
    o.onebit_exchange_update =
        p.get_choice("exchange", "update", {"update", "momentum"}) == "update";
    o.bias_correction = false;
    warn_no_effect(p, "bias_correction",
                   "1-bit Adam's update has no bias correction, as DeepSpeed's has none", warnings);
    ZT_CHECK(!p.get_bool("eps_inside_sqrt", false), p.key("eps_inside_sqrt"),
             ": only false (eps added after the square root) is supported; remove it");
    ZT_CHECK(!p.get_bool("amsgrad", false), p.key("amsgrad"),
             ": AMSGrad is not supported with 1-bit Adam; remove it or set it to false");
    ZT_CHECK(p.get_number("max_grad_norm", 0.0, 0.0) == 0.0, p.key("max_grad_norm"),
             ": 1-bit Adam's compressed phase never forms the global gradient, so it cannot be "
             "clipped; remove it");
    warn_no_effect(p, "cuda_aware", "zerotrain's collectives run on host memory", warnings);
    if (p.has("comm_backend_name")) {
        const std::string b = p.get_string("comm_backend_name", "");
        warnings.push_back(str_cat(p.key("comm_backend_name"), ": \"", b,
                                   "\" has no effect in zerotrain (the data-parallel group's "
                                   "backend, MPI or threads, carries 1-bit Adam's exchange)"));
    }
    o.type = "OneBitAdam";
}

}  // namespace

void parse_optimizer(Section& root, OptimizerConfig& o, std::vector<std::string>& warnings) {
    Section s = root.section("optimizer");
    if (s.empty()) return s.finish();
    const std::string given = s.get_string("type", "");
    const std::string type = to_lower(given);
    Section p = s.section("params");
    static const std::set<std::string> kLater = {"lamb",   "zerooneadam", "onebitlamb",
                                                 "muadam", "muadamw",     "musgd"};
    const char* kSupported =
        "\"Adam\", \"AdamW\", \"SGD\", \"Adagrad\", \"Lion\" or \"OneBitAdam\"";
    ZT_CHECK(!kLater.count(type), s.key("type"), ": \"", given, "\" is not supported yet; use ",
             kSupported);
    ZT_CHECK(type == "adam" || type == "adamw" || type == "sgd" || type == "adagrad" ||
                 type == "lion" || type == "onebitadam",
             s.key("type"), ": expected ", kSupported, " (any case), got ",
             given.empty() ? std::string("nothing") : "\"" + given + "\"");
    o.lr = p.get_number("lr", o.lr, 0.0);
    o.weight_decay = p.get_number("weight_decay", 0.0, 0.0);
    const std::initializer_list<const char*> sgd_only = {"momentum", "nesterov", "dampening"};
    const std::initializer_list<const char*> adagrad_only = {"lr_decay",
                                                             "initial_accumulator_value"};
    // Keys of 1-bit Adam alone.
    const std::initializer_list<const char*> onebit_only = {"freeze_step",       "cuda_aware",
                                                            "comm_backend_name", "eps_inside_sqrt",
                                                            "max_grad_norm",     "exchange"};
    if (type != "onebitadam") refuse_foreign(p, onebit_only, given);
    if (type == "sgd") {
        refuse_foreign(p, {"betas", "eps"}, "SGD");
        refuse_foreign(p, kAdamOnly, "SGD");
        refuse_foreign(p, adagrad_only, "SGD");
        o.type = "SGD";
        o.momentum = p.get_number("momentum", 0.0, 0.0);
        o.nesterov = p.get_bool("nesterov", false);
        ZT_CHECK(!o.nesterov || o.momentum > 0, p.key("nesterov"),
                 ": Nesterov momentum needs optimizer.params.momentum > 0, got ", o.momentum);
        ZT_CHECK(p.get_number("dampening", 0.0) == 0.0, p.key("dampening"),
                 ": only 0 is supported; remove it");
    } else if (type == "adagrad") {  // torch.optim.Adagrad's parameters and defaults
        refuse_foreign(p, {"betas"}, "Adagrad");
        refuse_foreign(p, kAdamOnly, "Adagrad");
        refuse_foreign(p, sgd_only, "Adagrad");
        o.type = "Adagrad";
        o.eps = p.get_number("eps", 1e-10, 0.0);
        o.lr_decay = p.get_number("lr_decay", 0.0, 0.0);
        o.initial_accumulator_value = p.get_number("initial_accumulator_value", 0.0, 0.0);
    } else if (type == "lion") {  // lion-pytorch's parameters and defaults
        refuse_foreign(p, {"eps"}, "Lion");
        refuse_foreign(p, kAdamOnly, "Lion");
        refuse_foreign(p, sgd_only, "Lion");
        refuse_foreign(p, adagrad_only, "Lion");
        o.type = "Lion";
        o.beta1 = 0.9;
        o.beta2 = 0.99;
        parse_betas(p, o, true);
    } else if (type == "onebitadam") {
        refuse_foreign(p, sgd_only, "OneBitAdam");
        refuse_foreign(p, adagrad_only, "OneBitAdam");
        parse_onebit_adam(p, o, warnings);
    } else {
        refuse_foreign(p, sgd_only, given);
        refuse_foreign(p, adagrad_only, given);
        parse_adam(p, type, o, warnings);
    }
    p.finish();
    s.finish();
}

void parse_scheduler(Section& root, const TrainConfig& c, SchedulerConfig& r) {
    Section s = root.section("scheduler");
    if (s.empty()) return s.finish();
    r.type = s.get_string("type", "");
    Section p = s.section("params");
    ZT_CHECK(r.type != "LRRangeTest" && r.type != "OneCycle", s.key("type"), ": \"", r.type,
             "\" is not supported yet; use WarmupLR, WarmupDecayLR or WarmupCosineLR");
    ZT_CHECK(r.type == "WarmupLR" || r.type == "WarmupDecayLR" || r.type == "WarmupCosineLR",
             s.key("type"),
             ": expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\", got ",
             r.type.empty() ? std::string("nothing") : "\"" + r.type + "\"");
    const bool cosine = r.type == "WarmupCosineLR";
    if (cosine) {
        refuse_foreign(p, {"warmup_min_lr", "warmup_max_lr"},
                       "WarmupCosineLR (it scales optimizer.params.lr by warmup_min_ratio and "
                       "cos_min_ratio)");
        r.warmup_min_ratio = p.get_number("warmup_min_ratio", 0.0, 0.0, 1.0);
        r.cos_min_ratio = p.get_number("cos_min_ratio", 1e-4, 0.0);
    } else {
        refuse_foreign(p, {"warmup_min_ratio", "cos_min_ratio"}, r.type);
        // "auto" as Hugging Face fills it: warmup_min_lr 0, warmup_max_lr the optimizer's lr.
        r.warmup_min_lr =
            p.is_auto("warmup_min_lr") ? 0.0 : p.get_number("warmup_min_lr", 0.0, 0.0);
        r.warmup_max_lr =
            p.is_auto("warmup_max_lr") ? c.optimizer.lr : p.get_number("warmup_max_lr", 1e-3, 0.0);
    }
    r.warmup_num_steps = p.get_int("warmup_num_steps", 1000, 0);
    r.warmup_type = p.get_choice("warmup_type", "log", {"log", "linear"});
    ZT_CHECK(p.get_int("last_batch_iteration", -1, LLONG_MIN) == -1, p.key("last_batch_iteration"),
             ": only -1 is supported (a resumed run takes its position from the checkpoint)");
    if (r.type == "WarmupLR") {
        refuse_foreign(p, {"total_num_steps"}, "WarmupLR");
    } else {  // absent or "auto": the run's length, as Hugging Face fills it
        r.total_num_steps =
            p.is_auto("total_num_steps") ? c.steps : p.get_int("total_num_steps", c.steps, 1);
    }
    p.finish();
    s.finish();
}

void check_onebit_adam(const TrainConfig& c) {
    if (c.optimizer.type != "OneBitAdam") return;
    OneBitAdamLayout l;
    l.zero_stage = c.zero.stage;
    l.tensor_or_pipeline = c.tp > 1 || c.pipe.active();
    l.gradient_clipping = c.gradient_clipping;
    l.fp16 = c.precision == "fp16";
    l.offload_optimizer = c.zero.offload_optimizer.device != "none";
    l.pruning = c.pruning.enabled();
    l.grad_compression = c.grad_compression.enabled;
    const std::string why = onebit_adam_refusal(l);
    ZT_CHECK(why.empty(), why);
}

}  // namespace zt::config_detail
