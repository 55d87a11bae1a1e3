"""A light tokenizer: `tokenizers` for the vocabulary, Jinja2 for the chat template.

Why not `transformers.AutoTokenizer`: importing transformers costs seconds, and the app must
start fast. This reads the same `tokenizer.json` and chat template, so ids are identical.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from . import SpecVizError


class ChatTokenizer:
    def __init__(self, model_dir: Path):
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise SpecVizError(f"No tokenizer.json in {model_dir}: SpecViz needs a fast-tokenizer file.")
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as e:  # corrupted file
            raise SpecVizError(f"Cannot read {path}: {e}. Re-download or rebuild the checkpoint.") from e
        cfg = {}
        cfg_path = model_dir / "tokenizer_config.json"
        if cfg_path.is_file():
            cfg = json.loads(cfg_path.read_text())
        template = cfg.get("chat_template")
        if (model_dir / "chat_template.jinja").is_file():
            template = (model_dir / "chat_template.jinja").read_text()
        self.chat_template: str | None = template
        self.bos_token = _token_str(cfg.get("bos_token"))
        self.eos_token = _token_str(cfg.get("eos_token"))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.special_ids = {
            t.content and self._tok.token_to_id(t.content)
            for t in self._tok.get_added_tokens_decoder().values()
            if t.special
        }

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        """The text one token contributes, for labels (byte pieces of a character show as-is)."""
        return _piece(self._tok, int(token_id))

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        if not self.chat_template:
            return "\n".join(m["content"] for m in messages)
        return _compile(self.chat_template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )

    def chat_ids(self, prompt: str, system: str | None = None) -> list[int]:
        """Token ids of a one-turn chat ending where the assistant starts to answer."""
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}
        ]
        return self.encode(self.render_chat(messages), add_special_tokens=False)


def _token_str(tok) -> str | None:
    if isinstance(tok, dict):
        return tok.get("content")
    return tok


@lru_cache(maxsize=8)
def _compile(template: str):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise SpecVizError(f"Chat template error: {msg}")

    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


def _piece(tok, token_id: int) -> str:
    text = tok.decode([token_id], skip_special_tokens=False)
    if text == "" or "\ufffd" in text:
        raw = tok.id_to_token(token_id)
        return raw if raw is not None else f"<{token_id}>"
    return text
