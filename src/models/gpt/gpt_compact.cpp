// export --compact for GPT (docs/pruning.md, "Compact export"): a head whose q, k, v rows of
// c_attn (weight and bias) and columns of attn.c_proj are all exactly 0 adds nothing to the
// residual stream (its v is 0, so its output is 0), nor does an MLP channel whose c_fc row, bias
// and mlp.c_proj column are 0 (gelu(0) = 0). Removing them gives the same function. One smaller
// config must fit every layer, so the same number k of such units goes from each layer: the
// fewest any layer has (structured pruning zeroes the same number in every layer), the lowest
// indices first. The head size stays: the compact config sets head_dim (A = n_heads x head_dim
// may then be below d_model) and d_ff.
#include <map>

#include "models/gpt/gpt_family.h"
#include "util/error.h"

namespace zt {

namespace {

struct LayerTensors {
    const NamedTensorF32* qkv_w = nullptr;   // (3A, C)
    const NamedTensorF32* qkv_b = nullptr;   // (3A)
    const NamedTensorF32* proj_w = nullptr;  // (C, A)
    const NamedTensorF32* fc_w = nullptr;    // (F, C)
    const NamedTensorF32* fc_b = nullptr;    // (F)
    const NamedTensorF32* down_w = nullptr;  // (C, F)
};

bool rows_zero(const NamedTensorF32& t, int64_t r0, int64_t n) {
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    for (int64_t i = r0 * cols; i < (r0 + n) * cols; ++i)
        if (t.data[i] != 0.0f) return false;
    return true;
}

bool cols_zero(const NamedTensorF32& t, int64_t c0, int64_t n) {
    for (int64_t r = 0; r < t.shape[0]; ++r)
        for (int64_t c = c0; c < c0 + n; ++c)
            if (t.data[r * t.shape[1] + c] != 0.0f) return false;
    return true;
}

// Units [0, units) of width w whose rows (in each of `parts` blocks of `rows` tensors) and
// columns (of `cols` tensors) are all 0.
std::vector<int64_t> zero_units(int64_t units, int64_t w, int64_t parts,
                                std::vector<const NamedTensorF32*> rows,
                                const NamedTensorF32& cols) {
    std::vector<int64_t> out;
    for (int64_t u = 0; u < units; ++u) {
        bool zero = cols_zero(cols, u * w, w);
        for (const NamedTensorF32* t : rows)
            for (int64_t p = 0; p < parts && zero; ++p)
                zero = rows_zero(*t, p * units * w + u * w, w);
        if (zero) out.push_back(u);
    }
    return out;
}

// Copies rows (in `parts` blocks of units x w) or columns of t, skipping the removed units.
std::vector<float> keep_rows(const NamedTensorF32& t, int64_t units, int64_t w, int64_t parts,
                             const std::vector<bool>& removed) {
    const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    std::vector<float> out;
    for (int64_t p = 0; p < parts; ++p)
        for (int64_t u = 0; u < units; ++u) {
            if (removed[static_cast<size_t>(u)]) continue;
            const float* src = t.data + (p * units * w + u * w) * cols;
            out.insert(out.end(), src, src + w * cols);
        }
    return out;
}

std::vector<float> keep_cols(const NamedTensorF32& t, int64_t units, int64_t w,
                             const std::vector<bool>& removed) {
    std::vector<float> out;
    for (int64_t r = 0; r < t.shape[0]; ++r)
        for (int64_t u = 0; u < units; ++u) {
            if (removed[static_cast<size_t>(u)]) continue;
            const float* src = t.data + r * t.shape[1] + u * w;
            out.insert(out.end(), src, src + w);
        }
    return out;
}

}  // namespace

CompactModel GptFamily::compact(std::span<const NamedTensorF32> params,
                                const std::string& /*weights_path*/) const {
    const GptOptions& m = model_;
    const int64_t L = m.n_layers, H = m.n_heads, D = m.head_size(), F = m.mlp_width();
    std::map<std::string, const NamedTensorF32*> by_name;
    for (const NamedTensorF32& p : params) by_name[p.name] = &p;
    auto get = [&](int64_t l, const char* suffix) {
        const std::string name = str_cat("transformer.h.", l, ".", suffix);
        auto it = by_name.find(name);
        ZT_CHECK(it != by_name.end(), "export --compact: no parameter ", name);
        return it->second;
    };
    std::vector<LayerTensors> layers(static_cast<size_t>(L));
    std::vector<std::vector<int64_t>> zero_heads, zero_channels;
    int64_t k_heads = H - 1, k_channels = F - 1;  // every layer keeps a head and a channel
    for (int64_t l = 0; l < L; ++l) {
        LayerTensors& t = layers[static_cast<size_t>(l)];
        t = {get(l, "attn.c_attn.weight"), get(l, "attn.c_attn.bias"), get(l, "attn.c_proj.weight"),
             get(l, "mlp.c_fc.weight"),    get(l, "mlp.c_fc.bias"),    get(l, "mlp.c_proj.weight")};
        zero_heads.push_back(zero_units(H, D, 3, {t.qkv_w, t.qkv_b}, *t.proj_w));
        zero_channels.push_back(zero_units(F, 1, 1, {t.fc_w, t.fc_b}, *t.down_w));
        k_heads = std::min<int64_t>(k_heads, static_cast<int64_t>(zero_heads.back().size()));
        k_channels =
            std::min<int64_t>(k_channels, static_cast<int64_t>(zero_channels.back().size()));
    }
    GptOptions small = m;
    small.n_heads = H - k_heads;
    if (k_heads > 0 || m.head_dim > 0) small.head_dim = D;
    if (k_channels > 0 || m.d_ff > 0) small.d_ff = F - k_channels;
    CompactModel out;
    // The model section: GptFamily(small)'s, head_dim and d_ff set where they are not GPT-2's.
    out.model = GptFamily(small, data_).describe_json();
    out.summary = str_cat("removed ", k_heads, " of ", H, " heads and ", k_channels, " of ", F,
                          " MLP channels in each of ", L, " layers");
    for (const NamedTensorF32& p : params) {
        int64_t l = -1;
        std::string suffix;
        for (int64_t i = 0; i < L && l < 0; ++i) {
            const std::string pre = str_cat("transformer.h.", i, ".");
            if (p.name.starts_with(pre)) {
                l = i;
                suffix = p.name.substr(pre.size());
            }
        }
        std::vector<int64_t> shape = p.shape;
        std::vector<float> data;
        if (l >= 0 && (suffix.starts_with("attn.c_attn") || suffix == "attn.c_proj.weight")) {
            std::vector<bool> removed(static_cast<size_t>(H), false);
            const auto& z = zero_heads[static_cast<size_t>(l)];
            for (int64_t k = 0; k < k_heads; ++k) removed[static_cast<size_t>(z[k])] = true;
            if (suffix == "attn.c_proj.weight") {
                data = keep_cols(p, H, D, removed);
                shape[1] = small.attn_width();
            } else {
                data = keep_rows(p, H, D, 3, removed);
                shape[0] = 3 * small.attn_width();
            }
        } else if (l >= 0 && (suffix.starts_with("mlp.c_fc") || suffix == "mlp.c_proj.weight")) {
            std::vector<bool> removed(static_cast<size_t>(F), false);
            const auto& z = zero_channels[static_cast<size_t>(l)];
            for (int64_t k = 0; k < k_channels; ++k) removed[static_cast<size_t>(z[k])] = true;
            if (suffix == "mlp.c_proj.weight") {
                data = keep_cols(p, F, 1, removed);
                shape[1] = small.mlp_width();
            } else {
                data = keep_rows(p, F, 1, 1, removed);
                shape[0] = small.mlp_width();
            }
        } else {
            int64_t n = 1;
            for (int64_t d : p.shape) n *= d;
            data.assign(p.data, p.data + n);
        }
        out.names.push_back(p.name);
        out.shapes.push_back(std::move(shape));
        out.data.push_back(std::move(data));
    }
    return out;
}

}  // namespace zt
