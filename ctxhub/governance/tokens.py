"""Token accounting: which encoding a model uses, exact counts, context-window defaults.

Encodings load from files shipped in ``encodings/`` and are verified against OpenAI's published
sha256, so counts are exact with no network. A model whose tokenizer we do not ship is counted
with the nearest encoding and marked approximate; if no encoding can be loaded at all, counts
fall back to bytes/4, also marked approximate.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import tiktoken
from pydantic_ai.messages import (
    BinaryContent,
    FilePart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponsePart,
    RetryFeedbackPart,
    RetryPromptPart,
    TextContent,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_core import to_json

from ctxhub.governance.images import LOW_DETAIL_TOKENS, image_tokens

log = logging.getLogger(__name__)

ENCODINGS_DIR = Path(__file__).parent / "encodings"

# Official sha256 of each rank file, as published with tiktoken.
_ENCODING_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
APPROXIMATE_FALLBACK = "bytes/4"

# Split pattern and special tokens of each encoding, as defined by tiktoken_ext.openai_public
# (whose loaders would try to download the rank files).
_ENCODING_SPECS: dict[str, tuple[str, dict[str, int]]] = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    "o200k_base": (
        "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
}

# Model-name prefixes (after the provider prefix) whose tokenizer we ship. Order matters: the
# more specific prefix first ("gpt-4o" before "gpt-4").
_EXACT_ENCODINGS: tuple[tuple[str, str], ...] = (
    ("gpt-4o", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("gpt-oss", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("gpt-35", "cl100k_base"),
    ("text-embedding-3", "cl100k_base"),
    ("text-embedding-ada-002", "cl100k_base"),
)
# Tokenizers of other families are closest to the newest BPE we ship.
_NEAREST_ENCODING = "o200k_base"

# Context windows by model family; more specific patterns first (001_49e9652a76426583.txt).
_CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude", 200_000),
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_000_000),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 128_000),
    ("gpt-3.5", 16_385),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("gemini", 1_000_000),
    ("grok-4", 2_000_000),
    ("grok", 131_072),
    ("deepseek-v3", 163_840),
    ("deepseek-chat-v3", 163_840),
    ("deepseek", 128_000),
    ("qwen3", 131_072),
    ("qwen", 128_000),
    ("llama-4", 327_680),
    ("llama", 128_000),
    ("mistral-large", 262_144),
    ("mistral", 128_000),
    ("mixtral", 128_000),
)
DEFAULT_CONTEXT_WINDOW = 128_000
# The offline models' windows (``ctxhub.governance.offline``), by full name.
OFFLINE_WINDOWS = {"offline:demo": 32_000, "offline:extractive": 32_000}


def model_name(model: str | None) -> str:
    """The bare, lower-case name of a pydantic-ai model string ("openai:gpt-4o" → "gpt-4o")."""
    if not model:
        return ""
    name = model.rsplit(":", 1)[-1] if ":" in model else model
    return name.rsplit("/", 1)[-1].strip().lower()


def context_window(model: str | None) -> int:
    """The default context window of a model, by family; 128k when the family is unknown."""
    if model in OFFLINE_WINDOWS:
        return OFFLINE_WINDOWS[model]
    name = model_name(model)
    for pattern, window in _CONTEXT_WINDOWS:
        if pattern in name:
            return window
    return DEFAULT_CONTEXT_WINDOW


@dataclass(frozen=True, slots=True)
class Tokenizer:
    """How tokens are counted for one model: the encoding and whether counts are exact."""

    encoding_name: str
    exact: bool

    @property
    def image_rule(self) -> str:
        """How an image is counted (``images``): by OpenAI's tiles for the models whose
        encoding is exact (OpenAI's own), by its pixels for the rest."""
        return "tiles" if self.exact else "pixels"

    def count(self, text: str) -> int:
        """Tokens in ``text`` with this tokenizer."""
        return count_text(text, self.encoding_name)

    def encode(self, text: str) -> list[int] | None:
        """The token ids of ``text``; None when counting falls back to bytes/4."""
        encoding = self._encoding()
        if encoding is None:
            return None
        return encoding.encode(text, disallowed_special=())

    def decode(self, tokens: Sequence[int]) -> str:
        """The text of token ids produced by :meth:`encode`."""
        encoding = self._encoding()
        if encoding is None:
            raise ValueError(f"{self.encoding_name} has no token ids to decode")
        return encoding.decode(list(tokens))

    def _encoding(self) -> tiktoken.Encoding | None:
        if self.encoding_name == APPROXIMATE_FALLBACK:
            return None
        return load_encoding(self.encoding_name)


@cache
def tokenizer_for(model: str | None) -> Tokenizer:
    """The tokenizer for a pydantic-ai model string; approximate unless we ship its encoding."""
    name = model_name(model)
    for prefix, encoding_name in _EXACT_ENCODINGS:
        if name.startswith(prefix):
            return _loadable(encoding_name, exact=True)
    return _loadable(_NEAREST_ENCODING, exact=False)


def _loadable(encoding_name: str, *, exact: bool) -> Tokenizer:
    if load_encoding(encoding_name) is None:
        return Tokenizer(APPROXIMATE_FALLBACK, exact=False)
    return Tokenizer(encoding_name, exact=exact)


@cache
def load_encoding(name: str) -> tiktoken.Encoding | None:
    """Load a shipped encoding, verifying its hash; None (logged) when it cannot be loaded."""
    path = ENCODINGS_DIR / f"{name}.tiktoken"
    try:
        data = path.read_bytes()
    except OSError:
        log.warning("encoding %s not found at %s; counting bytes/4", name, path)
        return None
    if hashlib.sha256(data).hexdigest() != _ENCODING_SHA256[name]:
        log.error("encoding file %s fails its sha256 check; counting bytes/4", path)
        return None
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }
    pattern, special_tokens = _ENCODING_SPECS[name]
    return tiktoken.Encoding(
        name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=special_tokens
    )


# Short texts (names, prompts, instructions) repeat across messages and runs; long ones are
# cached per part by identity in ``counting`` instead, so this cache never pins megabytes of
# tool output in memory.
_SHORT_TEXT = 4_096


# The last long text counted, its encoding and its count. Truncation counts its result to check
# the limit, and the truncated part is counted next from that same string object; remembering
# one text (held, so its identity cannot be reused) spares tokenising it twice.
_last_long: tuple[str, str, int] = ("", "", 0)


def count_text(text: str, encoding_name: str = _NEAREST_ENCODING) -> int:
    """Tokens in a text. Short texts are cached; long ones are counted directly."""
    global _last_long
    if not text:
        return 0
    if len(text) <= _SHORT_TEXT:
        return _count_short(text, encoding_name)
    last = _last_long
    if last[0] is text and last[1] == encoding_name:
        return last[2]
    count = _count(text, encoding_name)
    _last_long = (text, encoding_name, count)
    return count


@lru_cache(maxsize=65_536)
def _count_short(text: str, encoding_name: str) -> int:
    return _count(text, encoding_name)


def _count(text: str, encoding_name: str) -> int:
    encoding = load_encoding(encoding_name) if encoding_name != APPROXIMATE_FALLBACK else None
    if encoding is None:
        return (len(text.encode()) + 3) // 4
    # Special-token text inside a tool output is data, not a control token.
    return len(encoding.encode(text, disallowed_special=()))


def as_text(content: object) -> str:
    """Content as the text a provider sees: strings as they are, anything else as JSON."""
    if isinstance(content, str):
        return content
    return to_json(content, fallback=str).decode()


# Framing a provider adds around each message and each part (role markers, separators).
MESSAGE_OVERHEAD = 3
PART_OVERHEAD = 1
# Media cannot be tokenised as text: an image is counted by its size where its bytes say it
# (``images``), anything else as one low-detail image (approximate).
MEDIA_TOKENS = LOW_DETAIL_TOKENS


def part_text(part: ModelRequestPart | ModelResponsePart) -> str:
    """The text of a message part as a model request carries it."""
    return " ".join(part_pieces(part))


def part_pieces(part: ModelRequestPart | ModelResponsePart) -> tuple[str, ...]:
    """The texts a part is counted from, the bulky one (output, prompt, arguments) last.

    Counting the tool name apart from the output lets a long output be tokenised once and that
    encoding reused to truncate it.
    """
    match part:
        case ToolCallPart():
            return (part.tool_name, part.args_as_json_str())
        case ToolReturnPart():
            return (part.tool_name, part.model_response_str())
        case RetryPromptPart() | RetryFeedbackPart():
            return (part.model_response(),)
        case UserPromptPart() if not isinstance(part.content, str):
            return ("\n".join(_item_text(item) for item in part.content),)
        case FilePart():
            return ()
        case _:
            content = getattr(part, "content", None)
            return (as_text(content),) if content is not None else ()


def _item_text(item: object) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, TextContent):
        return item.content
    return ""


def media_tokens(part: ModelRequestPart | ModelResponsePart, image_rule: str = "tiles") -> int:
    """What the media items a part carries (images, audio, files) cost: an image whose bytes
    are at hand by its size (``images``, by ``image_rule``), anything else as one low-detail
    image."""
    match part:
        case UserPromptPart() if not isinstance(part.content, str):
            items: Sequence[object] = [
                item for item in part.content if not isinstance(item, str | TextContent)
            ]
        case ToolReturnPart():
            items = part.files
        case FilePart():
            items = [part.content]
        case _:
            return 0
    return sum(_item_tokens(item, image_rule) for item in items)


def _item_tokens(item: object, image_rule: str) -> int:
    if isinstance(item, BinaryContent) and item.is_image:
        return image_tokens(item.data, image_rule)
    return MEDIA_TOKENS


def instructions_of(messages: Sequence[ModelMessage]) -> str | None:
    """The instructions a provider receives with this history: the latest request's."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest) and message.instructions is not None:
            return message.instructions
    return None
