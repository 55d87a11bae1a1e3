"""A shipped head to fine-tune instead of a fresh one: loaded as trained, and an EAGLE-3 head's draft
vocabulary grown with its trained rows kept and the new rows mapped onto their scale."""

from __future__ import annotations

from pathlib import Path

import torch

from .. import SpecVizError
from ..heads.eagle import Eagle3Head, head_config_from_target
from ..heads.io import detect_method, load_head, read_state
from .batches import token_frequencies
from .data import SeqData


def init_head(folder, tcfg, method, grow_to: int = 0, data: SeqData | None = None, target_model=None):
    """A shipped head to fine-tune: more data should refine what the CPU learnt, not restart it.

    The EAGLE-3 head keeps its own draft vocabulary (d2t), so its LM-head rows stay meaningful;
    `grow_to` > its size adds the data's most frequent response tokens it lacks (`grow_vocab`)."""
    found = detect_method(read_state(Path(folder)))
    if found != method:
        raise SpecVizError(f"--init {folder} holds a {found} head, not {method}.")
    head = load_head(folder, target_cfg=tcfg, dtype=torch.float32)
    if method == "eagle3" and grow_to > head.draft_vocab_size:
        head = grow_vocab(head, tcfg, grow_to, data, target_model)
    head.train()
    return head


def grow_vocab(head: Eagle3Head, tcfg, size: int, data: SeqData, target_model) -> Eagle3Head:
    """The same EAGLE-3 head with a larger draft vocabulary: every trained weight kept, the new
    tokens (the data's most frequent response tokens outside the old vocabulary) start from the
    target's own LM-head rows mapped as training moved the old ones (`mapped_rows`).

    Why mapped: the trained rows have drifted from the target rows they started from, so raw target
    rows score the head's states on another scale and the new tokens win almost every row: the grown
    head starts far below the head it came from and spends its training climbing back (the shipped
    head's TRAINING.md has the measurements)."""
    old = head.target_ids().cpu()
    counts = token_frequencies(data, tcfg.vocab_size)
    counts[old] = -1
    extra = sorted(range(tcfg.vocab_size), key=lambda i: (-int(counts[i]), i))[: size - len(old)]
    ids = torch.cat([old, torch.tensor(extra, dtype=torch.long)]).sort().values
    grown = Eagle3Head(head_config_from_target(tcfg, draft_vocab_size=len(ids)))
    if head.config.get("specviz"):  # our settings (how much of the prompt it reads: draft_window) travel with it
        grown.config["specviz"] = dict(head.config["specviz"])
    grown.set_vocab(ids)
    sd = {k: v for k, v in head.state_dict().items() if k not in ("lm_head.weight", "d2t", "t2d")}
    grown.load_state_dict(sd, strict=False)
    with torch.no_grad():
        target_rows, trained = target_model.lm_head.float().cpu(), head.lm_head.weight.float().cpu()
        rows = mapped_rows(target_rows[old], trained, target_rows[ids])
        rows[torch.searchsorted(ids, old)] = trained
        grown.lm_head.weight.copy_(rows)
    return grown


def mapped_rows(source: torch.Tensor, trained: torch.Tensor, new_source: torch.Tensor, ridge: float = 1e-3) -> torch.Tensor:
    """new_source @ M, where M [H, H] is the ridge least-squares map with source @ M ~ trained
    (source, trained [n, H]: the target's LM-head rows of the old draft tokens and the head's trained
    rows for them). The ridge (relative to the mean diagonal of source^T source) keeps M tame where
    the rows leave directions unexplored."""
    s, t = source.double(), trained.double()
    gram = s.T @ s
    lam = ridge * float(gram.diagonal().mean())
    m = torch.linalg.solve(gram + lam * torch.eye(gram.shape[0], dtype=gram.dtype), s.T @ t)
    return (new_source.double() @ m).float()
