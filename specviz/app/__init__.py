"""The Streamlit side of SpecViz, one concern per module.

`state` (language, settings), `model` (the shared model cache), `methods` (which methods run
here), `prompts` (the prompt box and safe encoding), `gate` (the fair engine gate for a page),
`session` (one browser session's decoder), `sidebar` (sidebar and deep links). Pages import
from these modules; nothing here imports a page.
"""
