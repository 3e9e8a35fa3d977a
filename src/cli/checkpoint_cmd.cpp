// `zerotrain checkpoint inspect` and reading a checkpoint's weights for `export`.
#include <cstdio>
#include <filesystem>

#include "checkpoint/manifest.h"
#include "checkpoint/shards.h"
#include "cli/commands.h"
#include "runtime/checkpoint_chain.h"
#include "runtime/checkpoint_read.h"
#include "runtime/checkpointer.h"
#include "util/error.h"
#include "util/timer.h"
#include "util/units.h"

namespace zt::cli {

namespace {

namespace fs = std::filesystem;

// A checkpoint directory from what the user named: itself, or the newest checkpoint of a
// checkpoints directory or of a run directory.
std::string resolve_checkpoint(const std::string& dir) {
    if (fs::exists(dir + "/manifest.json")) return dir;
    for (const std::string& root : {dir, dir + "/checkpoints"}) {
        std::vector<std::string> found = checkpoint_candidates(root);
        if (!found.empty()) return found[0];
    }
    ZT_FAIL(dir, " is not a checkpoint (no manifest.json) and holds no checkpoints");
}

}  // namespace

int inspect_checkpoint(const std::string& dir, bool json) {
    const std::string ck = resolve_checkpoint(dir);
    const Manifest m = read_manifest(ck);
    if (json) {
        std::printf("%s\n", manifest_to_json(m).dump(2).c_str());
    } else {
        std::printf("checkpoint %s\n", ck.c_str());
        std::printf("  step %lld (%lld optimizer updates)\n", static_cast<long long>(m.step),
                    static_cast<long long>(m.updates));
        std::printf(
            "  layout: %d ranks (dp %d x tp %d x pp %d), ZeRO stage %d, compute %s, "
            "gradients %s\n",
            m.ranks, m.dp, m.tp, m.pp, m.zero_stage, m.compute_dtype.c_str(), m.grad_dtype.c_str());
        std::printf("  model: %zu parameters, %lld elements; optimizer %s; tensors per shard:",
                    m.params.size(), static_cast<long long>(m.numel), m.optimizer.c_str());
        for (const std::string& t : m.tensors) std::printf(" %s", t.c_str());
        std::printf("\n");
        if (m.trainer.contains("loss_scaler"))
            std::printf("  fp16 loss scale %g\n", m.trainer["loss_scaler"].value("scale", 0.0));
        const std::vector<ChainLink> chain = chain_of(m);
        if (!chain.empty()) {  // Note [Incremental checkpoints]
            std::printf("  incremental: embedding tables hold what changed since");
            for (const ChainLink& l : chain) std::printf(" %s", l.name.c_str());
            std::printf(" (each needed to resume it)\n");
        }
        if (const auto it = m.trainer.find("sparse");
            it != m.trainer.end() && it->contains("incremental_bytes"))
            std::printf("  embedding tables: %s written (%s; dynamic %s, static %s)\n",
                        format_bytes((*it)["incremental_bytes"].value("bytes", 0.0)).c_str(),
                        (*it)["incremental_bytes"].value("kind", std::string()).c_str(),
                        format_bytes((*it)["incremental_bytes"].value("dynamic", 0.0)).c_str(),
                        format_bytes((*it)["incremental_bytes"].value("static", 0.0)).c_str());
    }
    int bad = 0;
    uint64_t verified = 0;
    Stopwatch sw;
    for (const CheckpointFile& f : m.files) {
        std::string status = "ok";
        try {
            verify_shard(ck, f);
            verified += f.bytes;
        } catch (const Error& e) {
            status = e.message();
            ++bad;
        }
        if (!json)
            std::printf("  %s  rank %d  [%lld, %lld)  %s  crc32c %08x  %s\n", f.file.c_str(),
                        f.rank, static_cast<long long>(f.lo), static_cast<long long>(f.hi),
                        format_bytes(static_cast<double>(f.bytes)).c_str(), f.crc32c,
                        status.c_str());
        else if (status != "ok")
            std::fprintf(stderr, "%s\n", status.c_str());
    }
    // The read rate of the verification (every shard read once, front to back), on stderr with
    // --json so that stdout stays one JSON document.
    const double s = sw.elapsed_s();
    std::fprintf(json ? stderr : stdout, "  verified %s in %.3f s (%.0f MB/s)\n",
                 format_bytes(static_cast<double>(verified)).c_str(), s,
                 s > 0 ? static_cast<double>(verified) / s / 1e6 : 0.0);
    ZT_CHECK(bad == 0, ck, ": ", bad, " of ", m.files.size(), " files failed verification");
    return 0;
}

void load_checkpoint_weights(const std::string& dir, Engine& engine) {
    const std::string ck = resolve_checkpoint(dir);
    const Manifest m = read_manifest(ck);
    check_checkpoint_params(m, engine.arena().params(), ck);
    std::vector<float> whole(static_cast<size_t>(engine.arena().padded_numel()), 0.0f);
    read_checkpoint_range(ck, m, engine.arena().params(), 0, engine.arena().numel(), {"master"},
                          {whole.data()});
    engine.load_master(whole.data());  // whatever tier holds the master weights
    load_sparse_blocks(engine, m, ck);
    std::fprintf(stderr, "read the weights of %s (written by %d ranks, ZeRO stage %d)\n",
                 ck.c_str(), m.ranks, m.zero_stage);
}

}  // namespace zt::cli
