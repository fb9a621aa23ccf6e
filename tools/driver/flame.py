"""Flame graphs from folded stacks ("a;b;c 42" lines), written as standalone SVG.

`flame_svg(stacks)` draws one profile: a frame's width is the share of samples whose stack holds
it, callers below their callees. `diff_svg(before, after)` draws the branch's profile coloured by
how each frame's share changed against the baseline (red grew, blue shrank, the shade saturating
at ±5 percentage points), the shape Brendan Gregg's differential flame graphs use. Shares, not
sample counts, are compared, so profiles of different lengths compare fairly. `top_changes()`
lists the functions whose self time moved most, for the Markdown report.
"""

import html
from typing import Dict, List, Optional, Tuple

_ROW = 16
_WIDTH = 1200
_MIN_PX = 0.3  # narrower frames are not drawn


class _Node:
    __slots__ = ("name", "count", "children")

    def __init__(self, name: str):
        self.name = name
        self.count = 0
        self.children: Dict[str, "_Node"] = {}


def _tree(stacks: Dict[str, int]) -> _Node:
    root = _Node("all")
    for stack, count in stacks.items():
        node = root
        node.count += count
        for frame in stack.split(";"):
            node = node.children.setdefault(frame, _Node(frame))
            node.count += count
    return root


def _depth(node: _Node) -> int:
    return 1 + max((_depth(c) for c in node.children.values()), default=0)


def _color_hot(name: str) -> str:
    h = sum(ord(c) for c in name)
    return f"rgb({205 + h % 50},{(h * 7) % 130 + 60},{(h * 13) % 40})"


def _color_diff(delta: float) -> str:
    """delta: change of share in percentage points."""
    f = max(-1.0, min(1.0, delta / 5.0))
    if f >= 0:
        return f"rgb(255,{int(235 - 185 * f)},{int(235 - 185 * f)})"
    return f"rgb({int(235 + 185 * f)},{int(235 + 185 * f)},255)"


def _render(root: _Node, title: str, color, share_of) -> str:
    depth = _depth(root)
    height = (depth + 2) * _ROW + 20
    total = max(root.count, 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
           f'viewBox="0 0 {_WIDTH} {height}" font-family="monospace" font-size="11">',
           '<rect width="100%" height="100%" fill="#fafafa"/>',
           f'<text x="{_WIDTH / 2}" y="16" text-anchor="middle" font-size="14">'
           f'{html.escape(title)}</text>']

    def draw(node: _Node, x: float, level: int, path: Tuple[str, ...]):
        w = node.count / total * (_WIDTH - 20)
        if w < _MIN_PX:
            return
        y = height - (level + 1) * _ROW - 4
        pct = 100.0 * node.count / total
        label = f"{node.name} ({node.count} samples, {pct:.2f}%)"
        extra = share_of(path, pct)
        if extra:
            label += extra[1]
        fill = color(node.name, extra[0] if extra else 0.0)
        out.append(f'<g><title>{html.escape(label)}</title><rect x="{x:.2f}" y="{y}" '
                   f'width="{max(w - 0.5, 0.1):.2f}" height="{_ROW - 1}" fill="{fill}" rx="1"/>')
        chars = int(w / 7)
        if chars >= 3:
            text = node.name if len(node.name) <= chars else node.name[:chars - 2] + ".."
            out.append(f'<text x="{x + 3:.2f}" y="{y + _ROW - 4}">{html.escape(text)}</text>')
        out.append("</g>")
        cx = x
        for child in sorted(node.children.values(), key=lambda c: c.name):
            draw(child, cx, level + 1, path + (child.name,))
            cx += child.count / total * (_WIDTH - 20)

    draw(root, 10.0, 0, ())
    out.append("</svg>")
    return "\n".join(out)


def flame_svg(stacks: Dict[str, int], title: str) -> str:
    return _render(_tree(stacks), title, lambda name, _d: _color_hot(name), lambda p, s: None)


def _shares(root: _Node) -> Dict[Tuple[str, ...], float]:
    shares: Dict[Tuple[str, ...], float] = {}
    total = max(root.count, 1)

    def walk(node, path):
        shares[path] = 100.0 * node.count / total
        for child in node.children.values():
            walk(child, path + (child.name,))

    walk(root, ())
    return shares


def diff_svg(before: Dict[str, int], after: Dict[str, int], title: str) -> str:
    base = _shares(_tree(before))

    def share_of(path, pct):
        d = pct - base.get(path, 0.0)
        return d, f"; {d:+.2f} points vs baseline"

    return _render(_tree(after), title, lambda _name, d: _color_diff(d), share_of)


def self_shares(stacks: Dict[str, int]) -> Dict[str, float]:
    """% of samples whose innermost frame is each function."""
    total = max(sum(stacks.values()), 1)
    out: Dict[str, float] = {}
    for stack, count in stacks.items():
        leaf = stack.rsplit(";", 1)[-1]
        out[leaf] = out.get(leaf, 0.0) + 100.0 * count / total
    return out


def top_changes(before: Dict[str, int], after: Dict[str, int],
                n: int = 10) -> List[Tuple[str, float, float]]:
    """[(function, baseline self %, branch self %)] with the largest changes first."""
    a, b = self_shares(before), self_shares(after)
    rows = [(f, a.get(f, 0.0), b.get(f, 0.0)) for f in set(a) | set(b)]
    rows.sort(key=lambda r: abs(r[2] - r[1]), reverse=True)
    return rows[:n]


def folded_text(stacks: Optional[Dict[str, int]]) -> str:
    return "".join(f"{k} {v}\n" for k, v in sorted((stacks or {}).items()))
