// GPT name and layout mapping between zerotrain (nanoGPT names) and safetensors files in
// nanoGPT or Hugging Face GPT-2 layout. Import validates everything before writing any param.
#include "models/gpt/gpt_weights.h"

#include <cstring>
#include <set>

#include "tensor/dtype.h"
#include "util/error.h"

namespace zt {

namespace {

constexpr std::string_view kPrefix = "transformer.";
constexpr size_t kMaxListed = 20;  // names listed in one error message

std::string_view strip_prefix(std::string_view name) {
    return name.starts_with(kPrefix) ? name.substr(kPrefix.size()) : name;
}

// For "h.<digits>.<rest>" returns rest; otherwise an empty view.
std::string_view block_suffix(std::string_view canonical) {
    if (!canonical.starts_with("h.")) return {};
    size_t i = 2;
    while (i < canonical.size() && canonical[i] >= '0' && canonical[i] <= '9') ++i;
    if (i == 2 || i >= canonical.size() || canonical[i] != '.') return {};
    return canonical.substr(i + 1);
}

// The weights HF GPT-2 stores as Conv1D, [in, out]: the transpose of nn.Linear's [out, in].
bool is_conv1d_weight(std::string_view canonical) {
    const std::string_view rest = block_suffix(canonical);
    return rest == "attn.c_attn.weight" || rest == "attn.c_proj.weight" ||
           rest == "mlp.c_fc.weight" || rest == "mlp.c_proj.weight";
}

// Causal-mask buffers HF (and nanoGPT without flash attention) store; not parameters.
bool is_mask_buffer(std::string_view canonical) {
    const std::string_view rest = block_suffix(canonical);
    return rest == "attn.bias" || rest == "attn.masked_bias";
}

std::string name_list(const std::vector<std::string>& names) {
    std::string s;
    for (size_t i = 0; i < names.size() && i < kMaxListed; ++i) s += (i ? ", " : "") + names[i];
    if (names.size() > kMaxListed) s += str_cat(" and ", names.size() - kMaxListed, " more");
    return s;
}

int64_t param_numel(const NamedTensorF32& p) {
    int64_t n = 1;
    for (int64_t d : p.shape) {
        ZT_CHECK(d >= 0, "gpt weights: param '", p.name, "' has a negative dimension in shape ",
                 weight_shape_str(p.shape));
        ZT_CHECK(!__builtin_mul_overflow(n, d, &n), "gpt weights: param '", p.name, "' shape ",
                 weight_shape_str(p.shape), " overflows");
    }
    return n;
}

// The file's lm_head.weight must be wte itself (a tied head saved twice), bit for bit after
// conversion to f32.
void check_tied_head(const SafetensorsFile& file, const SafetensorsTensor& head) {
    const SafetensorsTensor* wte = file.find("transformer.wte.weight");
    if (!wte) wte = file.find("wte.weight");
    ZT_CHECK(wte != nullptr, "import_gpt_weights: ", file.path(),
             " has lm_head.weight but no wte.weight; zerotrain ties the head to wte");
    ZT_CHECK(head.shape == wte->shape && is_float_dtype(head.dtype),
             "import_gpt_weights: ", file.path(), ": lm_head.weight (", head.dtype, " ",
             weight_shape_str(head.shape), ") differs from ", wte->name, " (", wte->dtype, " ",
             weight_shape_str(wte->shape),
             "); zerotrain ties the output head to wte and cannot import an untied head");
    std::vector<float> a(static_cast<size_t>(head.numel)), b(a.size());
    file.read_f32(head.name, a.data(), head.numel);
    file.read_f32(wte->name, b.data(), wte->numel);
    for (size_t i = 0; i < a.size(); ++i) {
        ZT_CHECK(std::memcmp(&a[i], &b[i], sizeof(float)) == 0, "import_gpt_weights: ", file.path(),
                 ": lm_head.weight differs from ", wte->name, " at element ", i, " (", a[i], " vs ",
                 b[i], "); zerotrain ties the output head to wte and cannot import an untied head");
    }
}

struct ImportItem {
    NamedTensorF32* param;
    const SafetensorsTensor* src;
    bool transpose;  // file holds [in, out], the param [out, in]
};

}  // namespace

const char* weight_layout_name(WeightLayout layout) {
    return layout == WeightLayout::kHuggingFace ? "Hugging Face" : "nanoGPT";
}

WeightLayout detect_layout(const SafetensorsFile& file) {
    // c_attn beside its block's attn.c_proj: nanoGPT (3A, C) and (C, A), Hugging Face (C, 3A)
    // and (A, C); C is shared either way, whatever the attention width A of a compacted model
    // (docs/pruning.md), where c_attn alone may look like the other layout (C = 9 A).
    for (const auto& t : file.tensors()) {
        const std::string_view suffix = "attn.c_attn.weight";
        if (block_suffix(strip_prefix(t.name)) != suffix || t.shape.size() != 2) continue;
        std::string proj_name = t.name;
        proj_name.replace(proj_name.size() - suffix.size(), suffix.size(), "attn.c_proj.weight");
        const SafetensorsTensor* proj = file.find(proj_name);
        if (!proj || proj->shape.size() != 2) continue;
        if (t.shape[1] == proj->shape[0] && t.shape[0] == 3 * proj->shape[1])
            return WeightLayout::kNanoGpt;
        if (t.shape[0] == proj->shape[1] && t.shape[1] == 3 * proj->shape[0])
            return WeightLayout::kHuggingFace;
    }
    for (const auto& t : file.tensors()) {
        if (block_suffix(strip_prefix(t.name)) != "attn.c_attn.weight" || t.shape.size() != 2 ||
            t.shape[0] == t.shape[1])
            continue;
        if (t.shape[1] == 3 * t.shape[0]) return WeightLayout::kHuggingFace;
        if (t.shape[0] == 3 * t.shape[1]) return WeightLayout::kNanoGpt;
    }
    bool prefixed = false, hf_names = false;
    for (const auto& t : file.tensors()) {
        prefixed = prefixed || t.name.starts_with(kPrefix);
        hf_names = hf_names || t.name == "wte.weight" || !block_suffix(t.name).empty();
    }
    return !prefixed && hf_names ? WeightLayout::kHuggingFace : WeightLayout::kNanoGpt;
}

void import_gpt_weights(const SafetensorsFile& file, std::span<NamedTensorF32> params) {
    const WeightLayout layout = detect_layout(file);
    const std::string layout_note = str_cat(" (", weight_layout_name(layout), " layout)");

    // Names: every param found once, every file tensor claimed or known.
    std::vector<ImportItem> items;
    std::vector<std::string> missing;
    std::set<std::string> claimed, param_names;
    for (NamedTensorF32& p : params) {
        ZT_CHECK(param_names.insert(p.name).second, "import_gpt_weights: param '", p.name,
                 "' listed twice");
        const std::string_view canonical = strip_prefix(p.name);
        const SafetensorsTensor* full = file.find(p.name);
        const SafetensorsTensor* bare = canonical != p.name ? file.find(canonical) : nullptr;
        ZT_CHECK(!(full && bare), "import_gpt_weights: ", file.path(), " holds both '", p.name,
                 "' and '", canonical, "'; which one to load is ambiguous");
        const SafetensorsTensor* src = full ? full : bare;
        if (!src) {
            missing.push_back(p.name);
            continue;
        }
        claimed.insert(src->name);
        items.push_back(
            {&p, src, layout == WeightLayout::kHuggingFace && is_conv1d_weight(canonical)});
    }
    ZT_CHECK(missing.empty(), "import_gpt_weights: ", file.path(), layout_note, " lacks ",
             missing.size(), " tensor(s) the model needs: ", name_list(missing),
             "; is it a checkpoint of this model configuration?");
    std::vector<std::string> extra;
    const SafetensorsTensor* head = nullptr;
    for (const auto& t : file.tensors()) {
        if (claimed.contains(t.name) || is_mask_buffer(strip_prefix(t.name))) continue;
        if (t.name == "lm_head.weight") {
            head = &t;
            continue;
        }
        extra.push_back(t.name);
    }
    ZT_CHECK(extra.empty(), "import_gpt_weights: ", file.path(), layout_note, " holds ",
             extra.size(), " tensor(s) the model has no parameter for: ", name_list(extra),
             "; is it a checkpoint of this model configuration?");

    // Shapes and dtypes, before anything is written.
    for (const ImportItem& it : items) {
        const NamedTensorF32& p = *it.param;
        param_numel(p);
        std::vector<int64_t> expected = p.shape;
        if (it.transpose) {
            ZT_CHECK(p.shape.size() == 2, "import_gpt_weights: param '", p.name,
                     "' must be 2-D, has shape ", weight_shape_str(p.shape));
            expected = {p.shape[1], p.shape[0]};
        }
        ZT_CHECK(it.src->shape == expected, "import_gpt_weights: ", file.path(), ": tensor '",
                 it.src->name, "'", it.src->name != p.name ? str_cat(" (for '", p.name, "')") : "",
                 ": expected shape ", weight_shape_str(expected), ", got ",
                 weight_shape_str(it.src->shape), it.transpose ? " (Conv1D [in, out] layout)" : "",
                 layout_note);
        ZT_CHECK(is_float_dtype(it.src->dtype), "import_gpt_weights: ", file.path(), ": tensor '",
                 it.src->name, "' has dtype ", it.src->dtype, "; expected F32, BF16 or F16");
    }
    if (head) check_tied_head(file, *head);

    for (const ImportItem& it : items) {
        NamedTensorF32& p = *it.param;
        const int64_t n = param_numel(p);
        if (!it.transpose) {
            file.read_f32(it.src->name, p.data, n);
            continue;
        }
        // File [in, out] -> param [out, in].
        const int64_t out = p.shape[0], in = p.shape[1];
        std::vector<float> staged(static_cast<size_t>(n));
        file.read_f32(it.src->name, staged.data(), n);
        for (int64_t o = 0; o < out; ++o)
            for (int64_t i = 0; i < in; ++i) p.data[o * in + i] = staged[i * out + o];
    }
}

void import_gpt_weights(const std::string& path, std::span<NamedTensorF32> params) {
    const SafetensorsFile file(path);
    import_gpt_weights(file, params);
}

void export_gpt_weights(const std::string& path, std::span<const NamedTensorF32> params,
                        const std::string& dtype) {
    for (const NamedTensorF32& p : params)
        ZT_CHECK(p.name != "lm_head.weight", "export_gpt_weights: lm_head.weight given; the ",
                 "tied head is written once, as transformer.wte.weight");
    write_named_weights(path, params, dtype, "export_gpt_weights");
}

}  // namespace zt
