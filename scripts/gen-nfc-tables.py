#!/usr/bin/env python3
# gen-nfc-tables.py - regenerate lib/tok/nfc_data.c from Python's unicodedata:
#     python3 scripts/gen-nfc-tables.py > lib/tok/nfc_data.c
import unicodedata as u
dec = []   # (cp, a, b, primary)
for cp in range(0x110000):
    if 0xAC00 <= cp <= 0xD7A3: continue  # Hangul: algorithmic
    d = u.decomposition(chr(cp))
    if not d or d.startswith('<'): continue
    parts = [int(x, 16) for x in d.split()]
    assert len(parts) in (1, 2)
    a = parts[0]; b = parts[1] if len(parts) == 2 else 0
    prim = int(len(parts) == 2 and u.normalize('NFC', chr(cp)) == chr(cp))
    dec.append((cp, a, b, prim))
comp = sorted((a, b, cp) for cp, a, b, p in dec if p)
seconds = sorted(set(b for a, b, cp in comp))
ccc = []
cur = None
for cp in range(0x110000):
    c = u.combining(chr(cp))
    if c and cur and cur[1] == cp - 1 and cur[2] == c:
        cur[1] = cp
    elif c:
        cur = [cp, cp, c]; ccc.append(cur)
# Compatibility decompositions for NFKC: every code point whose own
# decomposition is a compatibility one, mapped to its full NFKD expansion
# (which already holds the canonical decompositions of its parts).
kd, pool = [], []
for cp in range(0x110000):
    if 0xAC00 <= cp <= 0xD7A3: continue
    d = u.decomposition(chr(cp))
    if not d.startswith('<'): continue
    x = [ord(c) for c in u.normalize('NFKD', chr(cp))]
    kd.append((cp, len(pool), len(x))); pool.extend(x)
def emit(name, ctype, rows, fmt, per):
    out = ['const %s %s[] = {' % (ctype, name)]
    for i in range(0, len(rows), per):
        out.append('\t' + ' '.join(fmt % r + ',' for r in rows[i:i+per]))
    out.append('};')
    out.append('const size_t %s_len = sizeof(%s) / sizeof(%s[0]);' % (name, name, name))
    return '\n'.join(out)
print('''/* nfc_data.c - Unicode %s tables for NFC and NFKC normalization (generated).
 *
 * Facts from the Unicode Character Database, extracted with Python's
 * unicodedata module: canonical decompositions (Hangul syllables are
 * algorithmic and not listed), the primary composites, the code points
 * that can combine with a preceding starter, and the canonical combining
 * class ranges, and for NFKC the full compatibility decomposition of
 * every code point that has one. Regenerate with
 * scripts/gen-nfc-tables.py over unicodedata when the
 * Unicode version moves; nothing here is edited by hand. */
#include "nfc_internal.h"
''' % u.unidata_version)
print(emit('atlas_nfc_decomp', 'struct atlas_nfc_decomp', dec, '{0x%X, 0x%X, 0x%X, %d}', 4)); print()
print(emit('atlas_nfc_comp', 'struct atlas_nfc_comp', comp, '{0x%X, 0x%X, 0x%X}', 5)); print()
print(emit('atlas_nfc_second', 'uint32_t', [(s,) for s in seconds], '0x%X', 10)); print()
print(emit('atlas_nfc_ccc', 'struct atlas_nfc_ccc', [tuple(c) for c in ccc], '{0x%X, 0x%X, %d}', 5))
print()
print(emit('atlas_nfkc_decomp', 'struct atlas_nfkc_decomp', kd, '{0x%X, %d, %d}', 5)); print()
print(emit('atlas_nfkc_pool', 'uint32_t', [(c,) for c in pool], '0x%X', 10))
import sys
print(len(kd), len(pool), file=sys.stderr)
print(len(dec), len(comp), len(seconds), len(ccc), file=sys.stderr)
