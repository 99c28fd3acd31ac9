#!/usr/bin/env python3
"""A flame graph (SVG) from folded stacks ("a;b;c COUNT" per line), as flamegraph.pl draws one.

    scripts/flamegraph.py FOLDED [TITLE] > out.svg

For machines without flamegraph.pl or inferno: the frames are boxes whose width is their share
of the samples, callers below callees, names cut to fit, each with its count in a tooltip."""
import html
import sys
import zlib

WIDTH, ROW, FONT = 1200, 16, 11


def tree(lines):
    root = {"n": 0, "kids": {}}
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        node = root
        node["n"] += int(count)
        for frame in stack.split(";"):
            node = node["kids"].setdefault(frame, {"n": 0, "kids": {}})
            node["n"] += int(count)
    return root


def color(name):
    h = zlib.crc32(name.encode())
    return f"rgb({205 + h % 50},{(h >> 8) % 180 + 40},{(h >> 16) % 55})"


def boxes(node, x, depth, scale, out):
    for name, kid in sorted(node["kids"].items()):
        w = kid["n"] * scale
        if w >= 0.5:
            out.append((x, depth, w, name, kid["n"]))
            boxes(kid, x, depth + 1, scale, out)
        x += w
    return out


def main():
    root = tree(open(sys.argv[1]))
    title = sys.argv[2] if len(sys.argv) > 2 else sys.argv[1]
    if not root["n"]:
        sys.exit(f"{sys.argv[1]}: no folded stacks")
    out = boxes(root, 10.0, 0, (WIDTH - 20) / root["n"], [])
    depth = max(d for _, d, _, _, _ in out) + 1
    height = (depth + 3) * ROW
    print(f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
          f'font-family="Verdana" font-size="{FONT}">')
    print(f'<rect width="100%" height="100%" fill="#f8f8f0"/>')
    print(f'<text x="{WIDTH / 2}" y="{ROW}" text-anchor="middle" font-size="{FONT + 3}">'
          f'{html.escape(title)} ({root["n"]} samples)</text>')
    for x, d, w, name, n in out:
        y = height - (d + 1) * ROW
        label = name if len(name) * FONT * 0.6 < w - 4 else name[: max(0, int((w - 4) / (FONT * 0.6)) - 2)] + ".."
        print(f'<g><title>{html.escape(name)}: {n} ({100 * n / root["n"]:.1f} %)</title>'
              f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{ROW - 1}" fill="{color(name)}" rx="2"/>'
              + (f'<text x="{x + 2:.1f}" y="{y + ROW - 4}">{html.escape(label)}</text>' if w > 20 else "")
              + "</g>")
    print("</svg>")


if __name__ == "__main__":
    main()
