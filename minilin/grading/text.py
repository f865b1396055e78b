"""Student-controlled text as data: folder names, file names, exception messages and printed output escaped for
each place they end up (the terminal, Markdown feedback, JSON, CSV).

`visible` shows every control or format character as an escape (`\\x1b`, `\\n`, `\\u202e`), so a name or a
message can neither move the cursor, recolour the terminal, reorder text (bidi overrides) nor start a line of
its own; a multi-line message keeps its line breaks only where asked (`keep="\\n"`), and every sink that prints
such a message indents or fences each line. `md_inline` makes a line safe inside Markdown (no
raw HTML, links or emphasis); `fence` picks a code fence that the text inside cannot close.
"""
import re
import unicodedata

_HIDDEN_CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")  # control, format, surrogate, private, unassigned,
# line and paragraph separators
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~])|(?<!\w)_|_(?!\w)|^([#>+-])")  # _ inside a word is plain text


def _escape(char):
    code = ord(char)
    if char == "\n":
        return "\\n"
    if char == "\t":
        return "\\t"
    if char == "\r":
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text, keep=""):
    """`text` with every control, format and separator character written as a visible escape (but those in
    `keep`, e.g. "\\n" for a message whose lines are printed one by one)."""
    text = str(text)
    if text.isprintable() and not any(c in text for c in "\u2028\u2029"):
        return text
    return "".join(c if c in keep or unicodedata.category(c) not in _HIDDEN_CATEGORIES else _escape(c)
                   for c in text)


def one_line(text):
    """`visible` with line breaks escaped too: a name, a file name, a summary."""
    return visible(text)


def md_inline(text):
    """One line of prose that Markdown renders as the text itself: no HTML, links, emphasis, code or table cells
    (HTML's & < > as entities, Markdown's punctuation backslash-escaped; an _ inside a word stays as it is)."""
    text = one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), text)


def fence(lines, info="text"):
    """A fenced code block around `lines` whose fence no line inside can close (longer than any ``` run)."""
    longest = max((len(run) for line in lines for run in re.findall(r"`{3,}", line)), default=0)
    mark = "`" * max(3, longest + 1)
    return [f"{mark}{info}", *lines, mark]
