"""SpS: speculative sampling with a small independent draft model (Leviathan et al., Chen et al.).

The draft model is a small Llama sharing the target's tokenizer (ours is distilled from the
target, `python -m specviz.train sps`), run by the same runtime as the target with its own KV
cache. It drafts a chain of `gamma` tokens: argmax at temperature 0, otherwise *drawn* from its
warped distribution q (so verification uses the min(1, p/q) rule with residual max(p - q, 0)).
Only tokens the target committed stay in the draft model's cache.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .. import SpecVizError
from ..heads.io import shipped_head_dir
from ..runtime.loading import DEFAULT_MODEL, read_config, read_state_dict
from ..core.sampling import probs, sample
from ..core.target import TargetModel
from ..core.tree import DraftTree
from .base import Drafter


class SpSDrafter(Drafter):
    q_is_probability = True
    name = "sps"
    taps = ()

    def __init__(self, draft_model, gamma: int = 4):
        self.draft, self.gamma = draft_model, int(gamma)
        self.cache = None

    def reset(self, context, taps):
        self.cache = self.draft.new_cache(max(512, len(context) + 512))

    def commit(self, processed, taps):
        pass  # the context is re-read at the next propose; drafted tokens were already dropped

    def snapshot(self):
        return {"length": self.cache.length}

    def restore(self, snap):
        self.cache.truncate(snap["length"])

    def _ensure(self, n):
        if n + self.gamma + 1 > self.cache.max_len:
            old = self.cache
            self.cache = self.draft.new_cache(2 * (n + self.gamma + 1))
            self.cache.k[..., : old.length, :] = old.k[..., : old.length, :]
            self.cache.v[..., : old.length, :] = old.v[..., : old.length, :]
            self.cache.length = old.length

    @torch.no_grad()
    def propose(self, context, root, params, generator):
        full = list(context) + [int(root)]
        self._ensure(len(full))
        L = min(self.cache.length, len(full) - 1)
        self.cache.truncate(L)
        out = self.draft.forward(torch.tensor([full[L:]], device=self.draft.device), self.cache, last_only=True)
        self.cache.commit()
        committed = self.cache.length
        toks, qs, dists = [], [], {}
        dist = probs(out.logits[0, -1], params) if not params.greedy else out.logits[0, -1].softmax(-1)
        for i in range(self.gamma):
            dists[i] = dist.cpu()
            t = int(dist.argmax()) if params.greedy else sample(dist, generator)
            toks.append(t)
            qs.append(float(dist[t]))
            if i == self.gamma - 1:
                break
            out = self.draft.forward(torch.tensor([[t]], device=self.draft.device), self.cache)
            self.cache.commit()
            logits = out.logits[0, -1]
            dist = probs(logits, params) if not params.greedy else logits.softmax(-1)
        self.cache.truncate(committed)
        return DraftTree.chain(int(root), toks, q=qs, dists=dists, sampled=not params.greedy)


def default_sps_dir(model_name: str | None = None) -> Path:
    """The shipped SpS draft model (a Hugging Face Llama folder) for `model_name` (default model)."""
    folder = shipped_head_dir(model_name or DEFAULT_MODEL, "sps")
    if not (folder / "config.json").is_file():
        raise SpecVizError(f"No SpS draft model shipped in {folder}; train one with `python -m specviz.train sps`.")
    return folder


def load_sps_model(folder, device="cpu", dtype=torch.float32):
    folder = Path(folder)
    cfg = read_config(folder)
    state = {k: v.float() for k, v in read_state_dict(folder).items()}
    return TargetModel(cfg, state, dtype=dtype, device=device, name=folder.name)


def make_drafter(target, head_dir=None, gamma: int = 4):
    model = target.model if hasattr(target, "model") else target
    folder = Path(head_dir) if head_dir else shipped_head_dir(model.name, "sps")
    if not (folder / "config.json").is_file():
        raise SpecVizError(f"No SpS draft model for {model.name} (looked in {folder}); train one with "
                           "`python -m specviz.train sps`.")
    draft = load_sps_model(folder, device=model.device, dtype=model.dtype)
    if getattr(model, "blocks", None) is not None:  # the target runs on GGUF blocks: so does its drafter
        draft.use_rounded_blocks()
    if draft.cfg.vocab_size != model.cfg.vocab_size:
        raise SpecVizError(
            f"The SpS draft model has a vocabulary of {draft.cfg.vocab_size} tokens, the target "
            f"{model.cfg.vocab_size}: they must share the tokenizer."
        )
    return SpSDrafter(draft, gamma=gamma)
