"""Device-tuned draft trees: the tree size that maximises expected tokens per second *here*.

Two measurements, kept apart because they change for different reasons:

* the head's **acceptance profile** (greedy, device independent, shipped beside the head as
  `tree_profile.json`): for every tree size N and depth d, the mean accepted length tau(N, d)
  that tree would have had. One calibration run answers every size. An EAGLE-2 tree of N nodes
  and depth d is the best N-1 of the same scored candidates, and a greedy walk accepts exactly
  the longest prefix of the target's own continuation that lies in the tree. Static trees
  (EAGLE-1, Medusa) rank their nodes by how often each was on the target's path, so a smaller
  static tree keeps the nodes that earn the most.
* the device's **costs** (measured once, cached per device, precision and model in the user
  cache): the target's forward time for n tree tokens after a few hundred cached ones (sizes
  timed in turns), and, from real rounds of the engine, the drafter's time at each tree shape
  and the engine's other cost per round at each size.

The model ranks every tree by tau(N, d) / (overhead(N) + draft(N, d) + forward(N)); its best few
(`shortlist`) and vanilla are then timed on a few built-in prompts and the fastest measured tree
is the choice (cached with the costs). Dynamic trees are also
profiled with a floor on the path probability (`min_prob`, tree_build.build_dynamic_tree): the tree is
then as large as the head is sure, so each round's size varies and the profile keeps, per floor
and depth, how often each (levels drafted, frontier width, tree size) occurred, to price it.
"""

from __future__ import annotations

from ..runtime.machine import forward_curve, interpolate, runtime_id  # noqa: F401  (read by tests and pages here)
from .costs import COSTS_VERSION, GRID, OVERHEAD_SIZES, STALE_FACTOR, cost_file, device_costs  # noqa: F401
from .pick import SAMPLED_AT, TUNED_DRAFTING, time_candidates, tree_for, tuned_tree  # noqa: F401
from .profiles import (MAX_DEPTH, MIN_PROBS, PROFILE_FILE, Recorder, collect_profile, dynamic_accepts,  # noqa: F401
                       floor_rounds, load_profile, save_profile)
from .ranking import (SHORTLIST_PROMPTS, SHORTLIST_TOKENS, candidate_shape, overhead_at, profile_id,  # noqa: F401
                      rank_trees, shape_key, shortlist)
