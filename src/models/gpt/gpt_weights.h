// GPT weights in safetensors files, with PyTorch-compatible names and layouts (DESIGN.md,
// "Weights"). zerotrain's GPT parameter names are nanoGPT's (transformer.wte.weight,
// transformer.h.{i}.attn.c_attn.weight as [3C, C] like nn.Linear, ...); the output head is tied
// to wte, so it is written once, as wte. Import also reads Hugging Face GPT-2 files: Conv1D
// weights stored [in, out] (c_attn [C, 3C]), usually without the "transformer." prefix.
// Works on plain (name, shape, f32 pointer) records so it does not depend on the GPT module.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "models/named_tensor.h"

namespace zt {

enum class WeightLayout {
    kNanoGpt,      // weights [out, in] like nn.Linear
    kHuggingFace,  // c_attn, attn.c_proj, c_fc, mlp.c_proj weights [in, out] like HF Conv1D
};

const char* weight_layout_name(WeightLayout layout);  // "nanoGPT", "Hugging Face"

// Decided by the shape of the first h.N.attn.c_attn.weight (with or without the "transformer."
// prefix): [C, 3C] is Conv1D (HF), [3C, C] nn.Linear (nanoGPT). Without a conclusive c_attn, by
// the names: HF files carry no "transformer." prefix. (transformers' save_pretrained writes
// "transformer."-prefixed names in Conv1D layout: the shape rule takes those as HF.)
WeightLayout detect_layout(const SafetensorsFile& file);


// Fills every param from the file, whichever layout it has: finds the tensor under the param's
// name or the name without "transformer.", transposes Conv1D weights, converts F32/BF16/F16 to
// f32. Errors (each naming the tensor): a missing tensor, a shape that differs (expected and
// got), a dtype that is not floating, a tensor the params do not claim (except the causal-mask
// buffers attn.bias / attn.masked_bias, ignored), an lm_head.weight that is not equal to wte.
// Everything is checked before the first param is written: on error the params are unchanged.
void import_gpt_weights(const SafetensorsFile& file, std::span<NamedTensorF32> params);
void import_gpt_weights(const std::string& path, std::span<NamedTensorF32> params);

// Writes params under their names in nanoGPT layout (as they are), converted to `dtype`
// ("F32", "BF16" or "F16"), with metadata {"format": "pt", "producer": "zerotrain"}. An
// lm_head.weight param is an error: the tied head is written once, as wte.
void export_gpt_weights(const std::string& path, std::span<const NamedTensorF32> params,
                        const std::string& dtype = "F32");

}  // namespace zt
