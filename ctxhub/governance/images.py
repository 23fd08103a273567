"""What an image costs in a request, from its size.

Providers count an image by its pixels, not by the bytes that carry it, each by its own rule,
read here from the width and height in the image's header (PNG, GIF, JPEG, WebP):

- ``tiles``, OpenAI's at high detail: scaled to fit 2048 x 2048, then its shorter side to 768;
  170 tokens a 512-pixel tile, plus 85;
- ``pixels``, Anthropic's: about one token per 750 pixels, the long edge scaled to 1568 at
  most (and the other providers', counted approximately, are of that order).

An image whose size cannot be read (a URL, a format not read here) counts as one low-detail
image, 85 tokens.
"""

from __future__ import annotations

import math
import struct

LOW_DETAIL_TOKENS = 85
TILE_TOKENS = 170
TILE = 512


def image_size(data: bytes) -> tuple[int, int] | None:
    """The width and height an image's header gives; None when it gives none this reads."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return _plausible(width, height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return _plausible(width, height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg(data)
    return None


PIXELS_PER_TOKEN = 750
LONG_EDGE = 1568


def image_tokens(data: bytes, rule: str = "tiles") -> int:
    """What an image costs by ``rule`` (``tiles`` or ``pixels``, see the module)."""
    size = image_size(data)
    if size is None:
        return LOW_DETAIL_TOKENS
    if rule == "pixels":
        scale = min(1.0, LONG_EDGE / max(size))
        return math.ceil(size[0] * scale * size[1] * scale / PIXELS_PER_TOKEN)
    fit = min(1.0, 2048 / max(size))
    shorter = min(1.0, 768 / (min(size) * fit))
    scale = fit * shorter
    tiles = math.ceil(size[0] * scale / TILE) * math.ceil(size[1] * scale / TILE)
    return LOW_DETAIL_TOKENS + TILE_TOKENS * tiles


def _plausible(width: int, height: int) -> tuple[int, int] | None:
    return (width, height) if 0 < width <= 100_000 and 0 < height <= 100_000 else None


def _webp(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return _plausible(width, height)
    if chunk == b"VP8 " and len(data) >= 30:
        width, height = struct.unpack("<HH", data[26:30])
        return _plausible(width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return _plausible((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    return None


def _jpeg(data: bytes) -> tuple[int, int] | None:
    """The size in a JPEG's start-of-frame segment, found by walking its segments."""
    position = 2
    while position + 9 < len(data):
        if data[position] != 0xFF:
            return None
        marker = data[position + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            position += 2
            continue
        length = struct.unpack(">H", data[position + 2 : position + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[position + 5 : position + 9])
            return _plausible(width, height)
        position += 2 + length
    return None
