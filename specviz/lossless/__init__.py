"""Losslessness: speculative decoding must produce exactly the target's distribution.

Two kinds of evidence, both usable from tests, the command line and the app:

* **Exact.** :func:`exact_first_token_dist` and :func:`exact_dist_k` enumerate one round's
  acceptance walk analytically (no sampling) and give the distribution of the first token(s) the
  round emits. For a correct rule it equals the warped target distribution to rounding; a broken
  variant (``variant=``, see :mod:`specviz.teaching.bugs`) differs. Deterministic trees are fixed, so any
  k up to the tree depth + 1 is covered; sampled trees are random, so they are marginalised over
  the draws: with a :class:`DraftTree` that is possible for the first token (it needs q at the
  root only), with a :class:`PrefixModel` (distributions after every prefix) for any k.
  Tokens after the round ends are taken from the target (vanilla), so ``exact_dist_k`` isolates
  this round's contribution.
* **Empirical.** :func:`run_check` draws N samples of the first k tokens with vanilla sampling and
  with speculative sampling on a real model. A :class:`TargetOracle` memoises the target's logits
  per prefix (tuple of generated tokens) and computes missing ones in batched tree-masked
  forwards, so both samplers see the very same target distributions; samples advance in lockstep
  waves so each wave costs a few batched forwards. Then a chi-square test of the two histograms
  and the total-variation distance with a confidence bound.

Drafters for the check, by their name in :mod:`specviz.methods`: the engine's own with their
shipped weights (``pld``, ``sps``, ``medusa``, ``eagle1``, ``eagle2``, ``eagle3``; papers' fixed
trees) and weightless toy drafters built on the target's logits (``toy-sps`` sampled chain,
``toy-specinfer`` sampled tree, ``toy-topk`` deterministic tree), which always have drafts and
rejections. Trees are pruned to the tokens still missing, as the engine does near its budget, so
no target row beyond the horizon is ever computed. The many tiny vector ops of sampling run
faster on one thread than with OpenMP contention, so ``run_check`` sets torch to one thread
while it runs (``threads=``).

Rooms: :mod:`.exact` (the enumeration), :mod:`.oracle` (target rows per prefix, drafters in
waves), :mod:`.empirical` (samplers, statistics, :func:`run_check`), :mod:`.cli`.

Command line (prints the exact difference, p-value, TV and bound; last line PASS or FAIL,
exit 0/1; bad input exits 2)::

    python -m specviz.lossless --samples 10000 --horizon 3 --temperature 1.0
    python -m specviz.lossless --method toy-topk --top-k 20 --samples 10000
    python -m specviz.lossless --method eagle3 --samples 2000 --horizon 2 --temperature 1.0
    python -m specviz.lossless --method pld --prompt "I flipped a coin and it landed on heads. \
        I flipped a coin and it landed on" --samples 10000 --broken            # negative control
"""

from ..drafters.toy import ToyDrafter, widths_is_chain
from .cli import DEFAULT_PROMPT, format_result, main
from .empirical import (
    CheckResult,
    SpecStats,
    compare_histograms,
    exact_at_prompt,
    make_drafter,
    run_check,
    speculative_samples,
    torch_threads,
    vanilla_samples,
)
from .exact import PrefixModel, exact_dist_k, exact_first_token_dist, exact_max_diff
from .oracle import EngineProposer, TargetOracle, node_prefixes

__all__ = [
    "CheckResult", "DEFAULT_PROMPT", "EngineProposer", "PrefixModel", "SpecStats", "TargetOracle",
    "ToyDrafter", "compare_histograms", "exact_at_prompt", "exact_dist_k", "exact_first_token_dist",
    "exact_max_diff", "format_result", "main", "make_drafter", "node_prefixes", "run_check",
    "speculative_samples", "torch_threads", "vanilla_samples", "widths_is_chain",
]
