"""Counts data pixels inside each plot of a report screenshot.

usage: check_report_png.py SCREENSHOT.png DOM.html
DOM.html is Chromium's --dump-dom of the same page at the same window size: each
<svg class="plot" id=ID data-box="x,y,w,h"> gives the plot's box in CSS pixels (the report's
inline script writes it). Prints one line per plot: "ID COUNT", COUNT being the pixels inside the
box, below its title and legend band (the top 44 pixels), whose colour is saturated (max - min
channel > 60): the palette colours of lines, areas and bars, never the white background, the
grey grid, axes or text.
"""
import re
import sys

from PIL import Image


def main():
    png, dom = sys.argv[1], sys.argv[2]
    html = open(dom, encoding="utf-8").read()
    img = Image.open(png).convert("RGB")
    width, height = img.size
    px = img.load()
    boxes = []
    for tag in re.findall(r"<svg\b[^>]*>", html):
        m_id = re.search(r'\bid="([^"]+)"', tag)
        m_box = re.search(r'\bdata-box="(-?\d+),(-?\d+),(\d+),(\d+)"', tag)
        if m_id and m_box:
            boxes.append((m_id.group(1), [int(v) for v in m_box.groups()]))
    print("size %d %d" % (width, height))
    for name, (x, y, w, h) in boxes:
        count = 0
        for j in range(max(0, y + 44), min(height, y + h)):
            for i in range(max(0, x), min(width, x + w)):
                r, g, b = px[i, j]
                if max(r, g, b) - min(r, g, b) > 60:
                    count += 1
        print("%s %d" % (name, count))


if __name__ == "__main__":
    main()
