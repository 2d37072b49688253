#!/usr/bin/env python3
# model-gemv-fp4.py - a host model of atlas_gemv_fp4 (kernels/sm90/common/linear.cu):
# its prmt lookups (PTX default mode, sign replicate included), the
# m16n8k16 fragment layout, the masked B columns and the FP32 scale folds,
# transcribed from the kernel, against the dot product of the NVFP4 matrix.
# Checks the index arithmetic without a GPU: python3 tests/gpu/model-gemv-fp4.py
# The kernel model works at the byte level: every load address as the
# kernel computes it, asserted inside the blob and aligned (16 bytes for
# weights and x, 2 for scales), rows past N, SwiGLU, several segments,
# gemv_locate's block walk and gemv_finish, against the dot product of the
# matrix the blob stands for, for K with last chunks of 32 .. 128 columns.
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
def f8(b):
    s = -1 if b & 0x80 else 1; e = (b >> 3) & 0xf; m = b & 7
    if e == 15 and m == 7: return float('nan')
    return s * (m/8 * 2**-6 if e == 0 else (1+m/8) * 2**(e-7))
import math
def mk_blob(N, K, gm, rng):
    s_off = 256 + ((N*K//2 + 255) & ~255)
    size = s_off + N*(K//16)
    b = bytearray(rng.getrandbits(8) for _ in range(size))
    for i in range(s_off, size):  # scales: finite
        v = rng.randrange(0x20, 0x40) | (0x80 if rng.random() < .3 else 0); b[i] = v
    return dict(b=b, s_off=s_off, ng=K//16, gm=gm, N=N, K=K, base=rng.randrange(0, 1<<20)*256)
def rd(blob, off, n, align):
    assert 0 <= off and off + n <= len(blob['b']), ('OOB', off, n, len(blob['b']))
    assert (blob['base'] + off) % align == 0, ('misaligned', off, align)
    return int.from_bytes(blob['b'][off:off+n], 'little')
def ref_row(blob, n):
    K = blob['K']; out = []
    for k in range(K):
        byte = blob['b'][256 + n*K//2 + k//2]; q = (byte >> (4*(k&1))) & 15
        s = blob['b'][blob['s_off'] + n*blob['ng'] + k//16]
        sf = struct.unpack('<f', struct.pack('<f', f8(s)*blob['gm']))[0]
        out.append(e2m1(q)*sf)
    return out
def silu_bf(s, u):
    r = lambda v: bf16(struct.unpack('<I', struct.pack('<f', v))[0] >> 16)  # trunc ok for model
    s, u = r(s), r(u); return s/(1+math.exp(-s))*u
def kernel(seg, swiglu, K, xs):
    # seg: list of (blob, N); returns outputs per seg (or swiglu out)
    fpb = 8 if swiglu else 16
    nblocks = sum(-(-N//fpb) for (_, N) in (seg[:1] if swiglu else seg))
    outs = [dict() for _ in seg]
    nch = (K+127)//128
    for blk in range(nblocks):
        b = blk; s = 0
        while s < len(seg)-1:
            nb = -(-seg[s][1]//fpb)
            if b < nb: break
            b -= nb; s += 1
        gseg = seg[s]; n0b = b*fpb; N = gseg[1]
        w0 = seg[0][0] if swiglu else gseg[0]; w1 = seg[1][0] if swiglu else gseg[0]
        red = [[None]*8 for _ in range(16)]
        for warp in range(8):
            acc = [[0.0]*4 for _ in range(32)]
            for c in range(warp, nch, 8):
                lanes = {}
                for lane in range(32):
                    gq, t = lane >> 2, lane & 3; tt = t & 1
                    n0 = n0b + gq; n1 = n0 if swiglu else n0 + 8
                    l0, l1 = n0 < N, n1 < N
                    col = c*128 + 32*t
                    def ldw(w, n, live):
                        if col < K and live:
                            off = 256 + n*(K//2) + col//2
                            return [rd(w, off+4*i, 4, 16 if i == 0 else 4) for i in range(4)]
                        return [0]*4
                    ra = ldw(w0, n0 if l0 else 0, l0); rb = ldw(w1, n1 if l1 else 0, l1)
                    sc = c*128 + 64*tt
                    def lds(w, n, ok, e=0):
                        base = w['s_off'] + n*w['ng'] + 4*tt + 8*c + e
                        return rd(w, base, 2, 2) if ok else 0
                    v0 = lds(w0, n0 if l0 else 0, sc < K); v1 = lds(w0, n0 if l0 else 0, sc+32 < K, 2)
                    v2 = lds(w1, n1 if l1 else 0, sc < K); v3 = lds(w1, n1 if l1 else 0, sc+32 < K, 2)
                    sv0 = v0 | v1 << 16 if l0 else 0; sv1 = v2 | v3 << 16 if l1 else 0
                    f32 = lambda v: struct.unpack('<f', struct.pack('<f', v))[0]
                    sc0 = [f32(f8((sv0 >> 8*k) & 255)*w0['gm']) for k in range(4)]
                    sc1 = [f32(f8((sv1 >> 8*k) & 255)*w1['gm']) for k in range(4)]
                    xl = t == (gq & 3)
                    if xl and col < K:
                        assert col % 8 == 0 and col + 32 <= len(xs)
                        xv = xs[col:col+32]
                    else: xv = [0.0]*32
                    lanes[lane] = (ra, rb, sc0, sc1, xv)
                for hf in range(2):
                    d = [[0.0]*4 for _ in range(32)]
                    for i in range(2*hf, 2*hf+2):
                        for half in range(2):
                            A = [[0.0]*16 for _ in range(16)]; B = [[0.0]*8 for _ in range(16)]
                            for lane in range(32):
                                g, t = lane >> 2, lane & 3
                                ra, rb, _, _, xv = lanes[lane]
                                wa, wb = decode(ra[i]), decode(rb[i])
                                P = lambda w: (bf16(w), bf16(w >> 16))
                                # atlas_mma_bf16(d, wa[2h], wb[2h], wa[2h+1], wb[2h+1], xv.{x|z}, xv.{y|w})
                                a0, a1, a2, a3 = P(wa[2*half]), P(wb[2*half]), P(wa[2*half+1]), P(wb[2*half+1])
                                xb = xv[8*i + 4*half: 8*i + 4*half + 4]
                                A[g][2*t:2*t+2] = a0; A[g+8][2*t:2*t+2] = a1
                                A[g][2*t+8:2*t+10] = a2; A[g+8][2*t+8:2*t+10] = a3
                                B[2*t][g], B[2*t+1][g] = xb[0], xb[1]
                                B[2*t+8][g], B[2*t+9][g] = xb[2], xb[3]
                            for lane in range(32):
                                g, t = lane >> 2, lane & 3
                                for j, (m, n) in enumerate([(g, 2*t), (g, 2*t+1), (g+8, 2*t), (g+8, 2*t+1)]):
                                    d[lane][j] += sum(A[m][k]*B[k][n] for k in range(16))
                    for lane in range(32):
                        sc0, sc1 = lanes[lane][2], lanes[lane][3]
                        acc[lane][0] += sc0[hf]*d[lane][0]; acc[lane][1] += sc0[2+hf]*d[lane][1]
                        acc[lane][2] += sc1[hf]*d[lane][2]; acc[lane][3] += sc1[2+hf]*d[lane][3]
            v0 = [a[0]+a[1] for a in acc]; v1 = [a[2]+a[3] for a in acc]
            for lane in range(32):
                gq, t = lane >> 2, lane & 3
                if t == 0:
                    red[2*gq if swiglu else gq][warp] = v0[lane] + v0[lane ^ 1]
                    red[2*gq+1 if swiglu else gq+8][warp] = v1[lane] + v1[lane ^ 1]
        outsN = 8 if swiglu else 16
        for r in range(outsN):
            nn = n0b + r
            if nn < N:
                if not swiglu: outs[s][nn] = sum(red[r])
                else: outs[0][nn] = silu_bf(sum(red[2*r]), sum(red[2*r+1]))
    return outs
def check(N, K, swiglu, nseg, seed):
    rng = random.Random(seed)
    xs = [bf16(rng.getrandbits(16) & 0xbfff & ~0x4000 | 0x3800) for _ in range(K)]
    Ns = [N] * (2 if swiglu else nseg)
    if nseg == 3: Ns = [N, N//4 or 1, N//4 or 1]
    seg = [(mk_blob(n, K, 0.37, rng), n) for n in Ns]
    outs = kernel(seg, swiglu, K, xs)
    err = 0
    for si, (w, n) in enumerate(seg[:1] if swiglu else seg):
        assert len(outs[si]) == n, (si, len(outs[si]), n)
        for r in range(n):
            if swiglu:
                g = sum(a*b for a, b in zip(ref_row(seg[0][0], r), xs)); u = sum(a*b for a, b in zip(ref_row(seg[1][0], r), xs))
                ref = silu_bf(g, u)
            else: ref = sum(a*b for a, b in zip(ref_row(w, r), xs))
            err = max(err, abs(outs[si][r]-ref)/(1e-3+abs(ref)))
    print('N', N, 'K', K, 'swiglu', swiglu, 'nseg', nseg, 'rel err', err); assert err < 1e-9
for (N, K, sw, ns_) in [(5, 64, 0, 1), (20, 96, 0, 1), (17, 320, 0, 1), (13, 32, 1, 2), (9, 192, 1, 2), (20, 160, 0, 3), (3, 1056, 0, 1)]:
    check(N, K, sw, ns_, N*K)
