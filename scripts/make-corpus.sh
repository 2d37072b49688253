#!/bin/sh
# make-corpus.sh - build the training corpus of the default model
# (scripts/train-default.py) from Debian's fortune cookie data:
#     sh scripts/make-corpus.sh
# Downloads the fortunes-min and fortunes packages with apt-get (Debian
# 12: version 1:1.99.1-7.3, BSD license, see their copyright files) into
# .corpus/ (git-ignored), unpacks them into .corpus/root and writes
# .corpus/fortunes.txt: one fortune after another, separated by one blank
# line. Within a fortune, blank lines are dropped (so a blank line always
# ends a fortune), backspace overstriking is removed (the files underline
# with "_\b"), double-encoded UTF-8 is repaired, other control characters
# and trailing blanks go. Files are read in byte order of their names,
# fortunes in file order, and a fortune seen before is skipped, so the
# output is the same on every run. The
# offensive/ directories (not in these packages anyway), the .dat indexes,
# the .u8 links and ascii-art (pictures, not text) are left out.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.corpus"
mkdir -p "$dir"
cd "$dir"
if ! ls fortunes-min_*.deb fortunes_*.deb >/dev/null 2>&1; then
	apt-get download fortunes-min fortunes
fi
rm -rf root
mkdir root
for deb in fortunes-min_*.deb fortunes_*.deb; do
	dpkg -x "$deb" root
done
python3 - root/usr/share/games/fortunes fortunes.txt <<'EOF'
import os
import re
import sys

src, dst = sys.argv[1], sys.argv[2]
SKIP = {"ascii-art"}
def unmangle(line):
    """A line of UTF-8 that was read as Latin-1 and encoded again (once
    or more: law has a triple-encoded apostrophe)."""
    while re.search(r"[\x80-\x9f]", line):
        try:
            line = line.encode("latin-1").decode("utf-8")
        except UnicodeError:
            break
    return line


seen = set()
out = []
files = 0
for name in sorted(os.listdir(src)):
    path = os.path.join(src, name)
    if (name in SKIP or "." in name or os.path.islink(path) or not os.path.isfile(path)
            or "offensive" in path):
        continue
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    files += 1
    for cookie in re.split(r"(?m)^%[ \t]*\n", text + "\n"):
        cookie = re.sub(r".\x08", "", cookie)             # overstriking
        cookie = "\n".join(unmangle(l) for l in cookie.split("\n"))
        cookie = re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", "", cookie)
        lines = [l.rstrip() for l in cookie.split("\n")]
        cookie = "\n".join(l for l in lines if l)
        if cookie and cookie not in seen:
            seen.add(cookie)
            out.append(cookie)
with open(dst, "w", encoding="utf-8") as f:
    f.write("\n\n".join(out) + "\n")
print(f"{dst}: {len(out)} fortunes from {files} files, {os.path.getsize(dst)} bytes")
EOF
