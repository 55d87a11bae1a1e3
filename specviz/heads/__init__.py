"""Draft heads (EAGLE-1, EAGLE-3, Medusa) and their checkpoints in the public layouts."""

from .eagle import Eagle1Head, Eagle3Head, head_config_from_target
from .io import load_head, save_head, shipped_head_dir
from .medusa import MedusaHeads

__all__ = ["Eagle1Head", "Eagle3Head", "MedusaHeads", "head_config_from_target", "load_head", "save_head",
           "shipped_head_dir"]
