"""Stored text as the console shows it: inert whatever it holds.

Jinja2 escapes every value (autoescape), so ``<script>`` is text; no stored text is ever put in
an attribute such as ``href`` (links carry ids as query values only, URL-encoded); and the
page's Content-Security-Policy allows no script at all. What escaping does not cover is done
here: a text is cut to a length a page can hold, with a marker saying how much was left out (a
memory or message may be up to a megabyte), and the Unicode controls that reorder text (an
RTL override, U+202E, makes ``gpj.exe`` read ``exe.jpg``) are shown as visible marks instead of
acting, each text also isolated in ``<bdi>`` by the templates so none reorders what surrounds
it. So are the characters that show nothing (:data:`INVISIBLE`): tag characters spell a line of
ASCII that a model reads and no page shows, so a memory would read "Ada likes tea" to the
operator while it told the model more. One pass over the text: linear in its length.
"""

from __future__ import annotations

# Embeddings, overrides, isolates and their pop, the implicit marks: what can reorder or hide
# text around it.
BIDI_CONTROLS = {
    0x061C,
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
}
# Zero-width space, word joiner and the invisible operators, the byte order mark, the Mongolian
# vowel separator, the tag characters. Not the zero-width joiner and non-joiner: letters of
# Persian or Indic words and emoji sequences need them, and marks would garble the text.
INVISIBLE = {0x180E, 0x200B, *range(0x2060, 0x2065), 0xFEFF, *range(0xE0000, 0xE0080)}
_VISIBLE = {code: f"[U+{code:04X}]" for code in BIDI_CONTROLS | INVISIBLE}

SHORT = 300  # an id, a label, a candidate's line
CELL = 1_000  # a memory's or message's text in a table
LONG = 4_000  # a text shown on its own (notes, an answer, an explanation's part)


def shown(text: str | None, limit: int = LONG) -> str:
    """``text`` cut to ``limit`` characters with a marker of what was left out, its direction
    controls and invisible characters made visible."""
    if text is None:
        return ""
    cut = text[:limit]
    marker = f" … [{len(text) - limit:,} more characters]" if len(text) > limit else ""
    return cut.translate(_VISIBLE) + marker
