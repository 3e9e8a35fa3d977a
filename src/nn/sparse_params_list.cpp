#include "nn/sparse_params_list.h"

#include <memory>

#include "util/error.h"

namespace zt {

SparseParamsList::SparseParamsList(std::vector<SparseParams*> parts) : parts_(std::move(parts)) {
    for (SparseParams* p : parts_) {
        ZT_ASSERT(p != nullptr, "a null part");
        ZT_ASSERT(p->optimizer_name() == parts_[0]->optimizer_name(),
                  "sparse parts with different optimizers");
    }
}

std::pair<SparseParams*, size_t> SparseParamsList::at(size_t i) const {
    for (SparseParams* p : parts_) {
        const size_t n = p->names().size();
        if (i < n) return {p, i};
        i -= n;
    }
    ZT_ASSERT(false, "sparse tensor index out of range");
    return {nullptr, 0};
}

void SparseParamsList::finish_grads() {
    for (SparseParams* p : parts_) p->finish_grads();
}

double SparseParamsList::grad_sq_sum() const {
    double s = 0;
    for (const SparseParams* p : parts_) s += p->grad_sq_sum();
    return s;
}

void SparseParamsList::scale_grads(float coef) {
    for (SparseParams* p : parts_) p->scale_grads(coef);
}

void SparseParamsList::step(double lr, double base_lr, int64_t update) {
    for (SparseParams* p : parts_) p->step(lr, base_lr, update);
}

void SparseParamsList::zero_grads() {
    for (SparseParams* p : parts_) p->zero_grads();
}

std::vector<std::string> SparseParamsList::names() const {
    std::vector<std::string> out;
    for (const SparseParams* p : parts_)
        for (std::string& n : p->names()) out.push_back(std::move(n));
    return out;
}

Shape SparseParamsList::shape(size_t i) const {
    auto [p, j] = at(i);
    return p->shape(j);
}

int64_t SparseParamsList::state_cols(size_t i) const {
    auto [p, j] = at(i);
    return p->state_cols(j);
}

int64_t SparseParamsList::numel() const {
    int64_t n = 0;
    for (const SparseParams* p : parts_) n += p->numel();
    return n;
}

std::vector<float> SparseParamsList::gather(size_t i, int root) {
    auto [p, j] = at(i);
    return p->gather(j, root);
}

void SparseParamsList::load(size_t i, const float* whole) {
    auto [p, j] = at(i);
    p->load(j, whole);
}

std::vector<SparseBlock> SparseParamsList::blocks(size_t i) const {
    auto [p, j] = at(i);
    return p->blocks(j);
}

void SparseParamsList::load_block(size_t i, const SparseBlock& b) {
    auto [p, j] = at(i);
    p->load_block(j, b);
}

bool SparseParamsList::overlaps(size_t i, const SparseBlock& b) const {
    auto [p, j] = at(i);
    return p->overlaps(j, b);
}

bool SparseParamsList::streamed(size_t i) const {
    auto [p, j] = at(i);
    return p->streamed(j);
}

std::vector<SparseBlock> SparseParamsList::pieces(size_t i) const {
    auto [p, j] = at(i);
    return p->pieces(j);
}

SparseBlock SparseParamsList::read_piece(size_t i, const SparseBlock& piece) const {
    auto [p, j] = at(i);
    return p->read_piece(j, piece);
}

void SparseParamsList::gather_rows(size_t i, int64_t r0, int64_t n, int root, float* out) {
    auto [p, j] = at(i);
    p->gather_rows(j, r0, n, root, out);
}

std::string SparseParamsList::optimizer_name() const { return parts_[0]->optimizer_name(); }

bool SparseParamsList::incremental(size_t i) const {
    auto [p, j] = at(i);
    return p->incremental(j);
}

void SparseParamsList::track_changes(bool on) {
    for (SparseParams* p : parts_) p->track_changes(on);
}

std::vector<SparseBlock> SparseParamsList::delta_blocks(size_t i) const {
    auto [p, j] = at(i);
    return p->delta_blocks(j);
}

void SparseParamsList::apply_delta(size_t i, SparseBlock& base, const SparseBlock& delta) const {
    auto [p, j] = at(i);
    p->apply_delta(j, base, delta);
}

bool SparseParamsList::is_delta(size_t i, const SparseBlock& b) const {
    auto [p, j] = at(i);
    return p->is_delta(j, b);
}

void SparseParamsList::saved() {
    for (SparseParams* p : parts_) p->saved();
}

bool SparseParamsList::keyed(size_t i) const {
    auto [p, j] = at(i);
    return p->keyed(j);
}

std::vector<uint64_t> SparseParamsList::row_ids(size_t i) const {
    auto [p, j] = at(i);
    return p->row_ids(j);
}

std::vector<uint64_t> SparseParamsList::take_deleted(size_t i) {
    auto [p, j] = at(i);
    return p->take_deleted(j);
}

std::vector<float> SparseParamsList::unadmitted_row(size_t i) const {
    auto [p, j] = at(i);
    return p->unadmitted_row(j);
}

std::vector<std::string> SparseParamsList::describe() const {
    std::vector<std::string> out;
    for (const SparseParams* p : parts_)
        for (std::string& l : p->describe()) out.push_back(std::move(l));
    return out;
}

nlohmann::json SparseParamsList::plan_json() const {
    nlohmann::json j = nlohmann::json::object();
    for (const SparseParams* p : parts_) j.update(p->plan_json());
    return j;
}

// Every part exchanges once per backward; `done` runs after the last of them.
void SparseParamsList::on_backward_exchange(std::function<void()> done) {
    auto seen = std::make_shared<size_t>(0);
    for (SparseParams* p : parts_)
        p->on_backward_exchange([this, seen, done] {
            if (++*seen < parts_.size()) return;
            *seen = 0;
            done();
        });
}

// Objects merge key by key; a "tier" (embedding.tier: static and dynamic tables both tiered) that
// two parts report is one: counters added, hit_rate recomputed from them.
nlohmann::json SparseParamsList::step_counters() const {
    nlohmann::json j = nlohmann::json::object();
    for (const SparseParams* p : parts_) {
        nlohmann::json c = p->step_counters();
        if (j.contains("tier") && c.contains("tier")) {
            nlohmann::json& t = j["tier"];
            for (const auto& [k, v] : c["tier"].items()) {
                if (!v.is_number() || !t.contains(k))
                    t[k] = v;
                else if (v.is_number_integer())
                    t[k] = t[k].get<int64_t>() + v.get<int64_t>();
                else
                    t[k] = t[k].get<double>() + v.get<double>();
            }
            const auto lookups = t.value("lookups", int64_t{0});
            t["hit_rate"] =
                lookups > 0 ? static_cast<double>(t.value("hits", int64_t{0})) / lookups : 1.0;
            c.erase("tier");
        }
        j.update(c);
    }
    return j;
}

}  // namespace zt
