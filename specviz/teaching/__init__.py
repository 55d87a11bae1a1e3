"""The Lesson's recorded rounds (solo and batched) and the bug zoo of wrong acceptance rules."""
