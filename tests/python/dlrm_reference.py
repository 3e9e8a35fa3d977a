"""DLRM in PyTorch, written as the facebookresearch/dlrm reference builds it, for
tests/models/dlrm_torch_test.cpp: nn.EmbeddingBag tables, bottom and top MLPs as nn.Sequential
(Linear at even indices, ReLU at odd ones), the dot interaction with the reference's li/lj order,
BCE computed from the logit. Loads zerotrain's initial weights, trains on the batches the test
wrote with plain SGD, prints one JSON line {"losses": [...]}, and checks that zerotrain's exported
final weights load into the module (strict) and match its own.

usage: dlrm_reference.py CONFIG_JSON INIT.safetensors BATCHES.safetensors STEPS LR FINAL.safetensors
Exit 77 when torch or safetensors does not import.
"""
import json
import sys

try:
    import torch
    from torch import nn
except Exception as e:  # noqa: BLE001
    print(f"torch unavailable: {e}")
    sys.exit(77)


class Dlrm(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.emb_l = nn.ModuleList(
            nn.EmbeddingBag(t["rows"], t["dim"], mode=t["pooling"]) for t in cfg["tables"])
        self.bot_l = self.mlp([cfg["dense_features"]] + cfg["bottom_mlp"], relu_last=True)
        n = len(cfg["tables"]) + 1
        self.offset = 1 if cfg["self_interaction"] else 0
        self.li = [i for i in range(n) for j in range(i + self.offset)]
        self.lj = [j for i in range(n) for j in range(i + self.offset)]
        top_in = cfg["bottom_mlp"][-1] + len(self.li)
        self.top_l = self.mlp([top_in] + cfg["top_mlp"], relu_last=False)

    @staticmethod
    def mlp(widths, relu_last):
        layers = []
        for i in range(len(widths) - 1):
            layers.append(nn.Linear(widths[i], widths[i + 1]))
            if relu_last or i + 2 < len(widths):
                layers.append(nn.ReLU())
        return nn.Sequential(*layers)

    def forward(self, dense, ids, offsets, weights):
        x = self.bot_l(dense)
        ly = [emb(ids[k], offsets[k][:-1], per_sample_weights=weights[k])
              for k, emb in enumerate(self.emb_l)]
        T = torch.cat([x] + ly, dim=1).view(x.shape[0], -1, x.shape[1])
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        zflat = Z[:, self.li, self.lj]
        return self.top_l(torch.cat([x, zflat], dim=1)).squeeze(1)


def main():
    try:  # only here: bench/dlrm_auc_torch.py imports the module for its Dlrm class alone
        from safetensors.torch import load_file
    except Exception as e:  # noqa: BLE001
        print(f"safetensors unavailable: {e}")
        sys.exit(77)
    cfg = json.loads(sys.argv[1])
    init, batches = load_file(sys.argv[2]), load_file(sys.argv[3])
    steps, lr, final_path = int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
    torch.manual_seed(0)
    model = Dlrm(cfg)
    model.load_state_dict(init, strict=True)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    K = len(cfg["tables"])
    losses = []
    for s in range(steps):
        dense = batches[f"{s}.dense"]
        labels = batches[f"{s}.labels"]
        ids = [batches[f"{s}.ids{k}"].long() for k in range(K)]
        offsets = [batches[f"{s}.offsets{k}"].long() for k in range(K)]
        weights = [batches.get(f"{s}.weights{k}") for k in range(K)]
        opt.zero_grad()
        logits = model(dense, ids, offsets, weights)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    final = load_file(final_path)
    fresh = Dlrm(cfg)
    fresh.load_state_dict(final, strict=True)  # zerotrain's export loads into the module
    worst = 0.0
    mine = model.state_dict()
    for name, t in fresh.state_dict().items():
        d = ((t - mine[name]).abs() / (mine[name].abs() + 1e-3)).max().item() if t.numel() else 0.0
        worst = max(worst, d)
    print(json.dumps({"losses": losses, "final_weights_max_rel_diff": worst}))


if __name__ == "__main__":
    main()
