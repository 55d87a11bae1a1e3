"""The round itself: draft tree, tree-masked target pass, LM-head rows, sampling, acceptance walk, commit, trace.

Reading order (docs/layout.md): engine -> tree_build -> tree -> target -> target_rows -> sampling -> verify -> trace; ops holds
the small tensor helpers the target and the heads share.
"""
