#!/usr/bin/python3
"""Doxygen's INPUT_FILTER for sluice's headers, which document with plain // comments (the style
of the codebase) rather than Doxygen's ///: a header's opening comment becomes its \\file
documentation, a run of // lines before a declaration that declaration's, and a trailing
`code;  // note` the member's (///<). Everything else passes through unchanged, line for line
(the \\file line added at the top aside, so Doxygen's line numbers are one ahead after it).

    comment_filter.py FILE   (prints the filtered FILE)
"""

import re
import sys

LINE_COMMENT = re.compile(r"^(\s*)//(?!/)( ?)(.*)$")
TRAILING = re.compile(r"^(.*?[;,{}]\s*)//(?![/<])\s?(.*)$")


def filter_lines(lines):
    out = []
    in_file_comment = True  # the comment at the top, before anything else
    for i, line in enumerate(lines):
        m = LINE_COMMENT.match(line)
        if m:
            indent, _, text = m.groups()
            if in_file_comment and i == 0:
                out.append("/// \\file")
                out.append(f"{indent}/// {text}".rstrip())
            else:
                out.append(f"{indent}/// {text}".rstrip())
            continue
        in_file_comment = False
        t = TRAILING.match(line)
        if t and '"' not in t.group(1):
            out.append(f"{t.group(1)}///< {t.group(2)}".rstrip())
            continue
        out.append(line)
    return out


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = f.read().split("\n")
    sys.stdout.write("\n".join(filter_lines(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
