// Var: a node of the tape, a value with an optional gradient. Parameters' Vars carry a persistent
// gradient (a view into the gradient arena) that backward accumulates into (+=); activation Vars get
// a gradient written by the first consumer's backward and added to by later ones (Tape::add_grad).
#pragma once

#include <functional>
#include <memory>

#include "tensor/tensor.h"

namespace zt {

struct VarNode {
    Tensor value;
    Tensor grad;                // undefined until backward produces it
    bool requires_grad = false;
    bool is_param = false;      // grad is persistent and accumulated into
    // Parameters whose gradient storage is lent per micro-step (ZeRO-2/3 gradient buckets): called
    // when backward first needs the gradient and it is undefined; it must define `grad`.
    std::function<void(VarNode&)> bind_grad;
};

using Var = std::shared_ptr<VarNode>;

inline Var make_var(Tensor value, bool requires_grad = false) {
    auto v = std::make_shared<VarNode>();
    v->value = std::move(value);
    v->requires_grad = requires_grad;
    return v;
}

}  // namespace zt
