"""A light tokenizer: `tokenizers` for the vocabulary, Jinja2 for the chat template.

Why not `transformers.AutoTokenizer`: importing transformers costs seconds, and the app must
start fast. This reads the same `tokenizer.json` and chat template, so ids are identical.
"""

from __future__ import annotations

import json
import threading
import unicodedata
from functools import lru_cache
from pathlib import Path

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

from .. import SpecVizError

_USER_SLOT = "\ue000specviz-user\ue000"  # private-use sentinel, never typed by a user


def clean_prompt(prompt) -> str:
    """What a user typed, made safe to tokenise: line ends normalised, control characters other
    than tab and newline dropped (RTL text, emoji and every other character are kept)."""
    text = str(prompt).replace("\r\n", "\n").replace("\r", "\n")
    return "".join(c for c in text if c in "\t\n" or unicodedata.category(c) != "Cc")


class ChatTokenizer:
    def __init__(self, model_dir: Path):
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
        self._added_texts = [t.content for t in self._tok.get_added_tokens_decoder().values() if t.content]
        self._plain: Tokenizer | None = None  # a copy reading marker text as characters (safe_chat_ids)
        self._plain_lock = threading.Lock()
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

    def safe_chat_ids(self, prompt: str) -> list[int]:
        """`chat_ids` of the cleaned prompt, where the user's text is always ordinary text:
        chat-template markers such as `<|im_start|>` typed by a user are encoded character by
        character, never as the special tokens that delimit turns. Prompts without such markers
        get exactly `chat_ids(clean_prompt(prompt))`."""
        prompt = clean_prompt(prompt)
        if not any(a in prompt for a in self._added_texts):
            return self.chat_ids(prompt)
        rendered = self.render_chat([{"role": "user", "content": _USER_SLOT}])
        if rendered.count(_USER_SLOT) != 1:
            raise SpecVizError("This model's chat template cannot take text that contains its own markers "
                               "(such as <|im_start|>): remove them from the prompt.")
        pre, post = rendered.split(_USER_SLOT)
        return self.encode(pre) + self._plain_encoder().encode(prompt, add_special_tokens=False).ids + self.encode(post)

    def _plain_encoder(self) -> Tokenizer:
        """A private copy of the vocabulary that reads special-token text as ordinary characters
        (a copy: the shared tokenizer stays read-only for every session)."""
        with self._plain_lock:
            if self._plain is None:
                plain = Tokenizer.from_str(self._tok.to_str())
                plain.encode_special_tokens = True
                self._plain = plain
            return self._plain


def _token_str(tok) -> str | None:
    if isinstance(tok, dict):
        return tok.get("content")
    return tok


@lru_cache(maxsize=8)
def _compile(template: str):
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
