#!/usr/bin/env python3
# model-gemv-fp4.py - a host model of atlas_gemv_fp4 (kernels/sm90/common/linear.cu):
# its prmt lookups (PTX default mode, sign replicate included), the
# m16n8k16 fragment layout, the masked B columns and the FP32 scale folds,
# transcribed from the kernel, against the dot product of the NVFP4 matrix.
# Checks the index arithmetic without a GPU: python3 tests/gpu/model-gemv-fp4.py
import random, struct
def bf16(bits): return struct.unpack('<f', struct.pack('<I', (bits & 0xffff) << 16))[0]
def prmt(a, b, s):
    by = [(a >> (8*i)) & 0xff for i in range(4)] + [(b >> (8*i)) & 0xff for i in range(4)]
    r = 0
    for i in range(4):
        n = (s >> (4*i)) & 0xf
        v = by[n & 7]
        if n & 8: v = 0xff if v & 0x80 else 0
        r |= v << (8*i)
    return r
E2M1 = [0, .5, 1, 1.5, 2, 3, 4, 6]
def e2m1(c): return (-1 if c & 8 else 1) * E2M1[c & 7]
def decode(u):
    th0, th1, tl0, tl1 = 0x3F3F3F00, 0x40404040, 0xC0800000, 0xC0804000
    m = u & 0x77777777
    w = [0]*4
    for h in range(2):
        sm = m >> 16 if h else m; sf = u >> 16 if h else u
        hi = prmt(th0, th1, sm); lo = prmt(tl0, tl1, sm)
        neg = prmt(0x80808080, 0x80808080, sf)
        hs = hi | ((neg << 7) & 0x80808080 & 0xffffffff)
        w[2*h] = prmt(lo, hs, 0x5140); w[2*h+1] = prmt(lo, hs, 0x7362)
    return w
# check decode
for _ in range(2000):
    u = random.getrandbits(32); w = decode(u)
    for i in range(8):
        v = bf16(w[i//2] >> (16*(i%2)))
        assert v == e2m1((u >> (4*i)) & 0xf), (hex(u), i, v)
print("decode ok")
def lo(x): return x & 0xffff
def hi(x): return x >> 16
def mma(d, regsA, regsB):
    # regsA[lane] = (a0,a1,a2,a3), regsB[lane] = (b0,b1); bf16 pairs as floats lists
    A = [[0.0]*16 for _ in range(16)]; B = [[0.0]*8 for _ in range(16)]
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        a0,a1,a2,a3 = regsA[lane]; b0,b1 = regsB[lane]
        A[g][2*t], A[g][2*t+1] = a0; A[g+8][2*t], A[g+8][2*t+1] = a1
        A[g][2*t+8], A[g][2*t+9] = a2; A[g+8][2*t+8], A[g+8][2*t+9] = a3
        B[2*t][g], B[2*t+1][g] = b0; B[2*t+8][g], B[2*t+9][g] = b1
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for j,(m,n) in enumerate([(g,2*t),(g,2*t+1),(g+8,2*t),(g+8,2*t+1)]):
            d[lane][j] += sum(A[m][k]*B[k][n] for k in range(16))
def pair(w): return (bf16(w), bf16(w >> 16))
def f8(b):
    s = -1 if b & 0x80 else 1; e = (b >> 3) & 0xf; m = b & 7
    if e == 15 and m == 7: return float('nan')
    return s * (m/8 * 2**-6 if e == 0 else (1+m/8) * 2**(e-7))
def run(K, N=16, seed=1):
    random.seed(seed)
    ng = K // 16
    q = [[random.getrandbits(4) for _ in range(K)] for _ in range(N)]
    sc = [[random.choice([b for b in range(0x08, 0x70)]) for _ in range(ng)] for _ in range(N)]
    # pad bytes beyond the row: NaN scales to catch reads
    gm = 0.37
    x = [random.uniform(-2, 2) for _ in range(K)]
    x = [bf16(struct.unpack('<I', struct.pack('<f', v))[0] >> 16) for v in x]
    ref = [sum(x[k]*e2m1(q[n][k])*(f8(sc[n][k//16])*gm) for k in range(K)) for n in range(N)]
    def word(n, col, i):  # 32-bit word i of the lane's 16 bytes at col
        u = 0
        for j in range(8):
            c = col + 8*i + j
            u |= (q[n][c] if c < K else 0) << (4*j)
        return u
    nch = (K + 127)//128
    red = [[0.0]*8 for _ in range(16)]
    for warp in range(8):
        acc = [[0.0]*4 for _ in range(32)]
        for c in range(warp, nch, 8):
            scs = {}
            for lane in range(32):
                g, t = lane >> 2, lane & 3; tt = t & 1
                s0 = c*128 + 64*tt
                def sl(n, gi):
                    return f8(sc[n][gi])*gm
                gb = 8*c + 4*tt
                scs[lane] = ([sl(g, gb+k) if s0 + (0 if k < 2 else 32) < K else 0.0 for k in range(4)],
                             [sl(g+8, gb+k) if s0 + (0 if k < 2 else 32) < K else 0.0 for k in range(4)])
            for hf in range(2):
                d = [[0.0]*4 for _ in range(32)]
                for i in range(2*hf, 2*hf+2):
                    for half in range(2):
                        rA = {}; rB = {}
                        for lane in range(32):
                            g, t = lane >> 2, lane & 3
                            col = c*128 + 32*t
                            wa = decode(word(g, col, i)) if col < K else decode(0)
                            wb = decode(word(g+8, col, i)) if col < K else decode(0)
                            xl = t == (g & 3)
                            if xl and col < K:
                                xs = x[col+8*i+4*half: col+8*i+4*half+4]
                            else:
                                xs = [0.0]*4
                            rA[lane] = (pair(wa[2*half]), pair(wb[2*half]), pair(wa[2*half+1]), pair(wb[2*half+1]))
                            rB[lane] = ((xs[0], xs[1]), (xs[2], xs[3]))
                        mma(d, rA, rB)
                for lane in range(32):
                    s0, s1 = scs[lane]
                    acc[lane][0] += s0[hf]*d[lane][0]; acc[lane][1] += s0[2+hf]*d[lane][1]
                    acc[lane][2] += s1[hf]*d[lane][2]; acc[lane][3] += s1[2+hf]*d[lane][3]
        v0 = [acc[l][0]+acc[l][1] for l in range(32)]; v1 = [acc[l][2]+acc[l][3] for l in range(32)]
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            if t == 0:
                red[g][warp] = v0[lane] + v0[lane ^ 1]
                red[g+8][warp] = v1[lane] + v1[lane ^ 1]
    out = [sum(red[n]) for n in range(16)]
    err = max(abs(out[n]-ref[n]) for n in range(N)) / max(abs(r) for r in ref)
    print("K", K, "max rel err", err)
    assert err < 1e-9
for K in (32, 96, 160, 1056):
    run(K)
