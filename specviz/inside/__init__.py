"""Inside EAGLE: what the heads read, write and learn, measured from the engine's own heads.

One module per idea, each returning plain JSON-able dicts that the "Inside the drafter" page
(`views/inside.py`) draws and `record.py` stores under `assets/inside/`:
  - `feature`:   EAGLE-1 drafting features step by step, and the uncertainty the shifted token removes;
  - `expansion`: EAGLE-2's levels (scored, expanded, kept) and the calibration of draft confidence;
  - `fusion`:    EAGLE-3's three taps through the target's LM head (a logit lens) beside its draft;
  - `ttt`:       the training-time-test unroll and its attention mask;
  - `vocab`:     the reduced draft vocabulary and what it cannot draft.
"""
