"""The PTX evaluator behind ptx_check.py: one CTA of a Triton kernel's straight-line PTX,
all threads at once (every register a NumPy array over the threads, predicated
instructions acting where their predicate holds), with one rounding per floating-point
instruction.  Anything outside the subset it knows raises :class:`Unsupported`."""
from __future__ import annotations

import re
from fractions import Fraction

import numpy as np

from ..order import arith as red
from ..text_table import split_top


class Unsupported(NotImplementedError):
    pass


ADDRESS_STRIDE = 1 << 40    # fake global addresses: argument i at (i + 1) * ADDRESS_STRIDE + offset


def _imm(tok: str):
    tok = tok.strip().rstrip("U")
    if tok.startswith("0f"):
        return np.uint64(int(tok[2:], 16))
    if tok.startswith("0d"):
        return np.uint64(int(tok[2:], 16))
    if tok.lower().startswith(("0x", "-0x")):
        return np.uint64(int(tok, 16) & 0xFFFFFFFFFFFFFFFF)
    return np.uint64(int(tok) & 0xFFFFFFFFFFFFFFFF)


def _bits(t: str) -> int:
    m = re.search(r"(\d+)$", t)
    return int(m.group(1)) if m else 32


class CTA:
    """One CTA of ``n`` threads running a PTX kernel's straight-line body."""

    def __init__(self, body: list, params: dict, memory: list, n: int, ctaid,
                 wgmma=None, nctaid=None):
        self.body, self.params, self.mem, self.n = body, params, memory, n
        self.ctaid = tuple(ctaid) + (0,) * (3 - len(ctaid)) if isinstance(ctaid, tuple) \
            else (int(ctaid), 0, 0)
        self.nctaid = tuple(nctaid) + (1,) * (3 - len(nctaid)) if nctaid else None
        self.wgmma = wgmma
        self.r: dict = {}
        self.smem = np.zeros(1 << 18, np.uint8)

    # -- operands ------------------------------------------------------------------------
    def val(self, tok: str) -> np.ndarray:
        tok = tok.strip()
        if tok.startswith("%"):
            if tok in ("%tid.x",):
                return np.arange(self.n, dtype=np.uint64)
            if tok in ("%tid.y", "%tid.z"):
                return np.zeros(self.n, np.uint64)
            if tok in ("%ctaid.x", "%ctaid.y", "%ctaid.z"):
                return np.full(self.n, self.ctaid["xyz".index(tok[-1])], np.uint64)
            if tok in ("%nctaid.x", "%nctaid.y", "%nctaid.z") and self.nctaid:
                return np.full(self.n, self.nctaid["xyz".index(tok[-1])], np.uint64)
            if tok == "%ntid.x":
                return np.full(self.n, self.n, np.uint64)
            if tok.startswith(("%nctaid", "%ntid", "%nsmid", "%smid", "%clock", "%globaltimer")):
                raise Unsupported(f"special register {tok}")
            if tok not in self.r:
                return np.zeros(self.n, np.uint64)      # never written: undefined, 0 here
            return self.r[tok]
        if tok == "global_smem":
            return np.zeros(self.n, np.uint64)
        if re.fullmatch(r"[A-Za-z_]\w*", tok):      # a register of an inline-asm block
            return self.r.get(tok, np.zeros(self.n, np.uint64))
        return np.full(self.n, _imm(tok), np.uint64)

    def put(self, dst: str, v, pred):
        v = np.asarray(v).astype(np.uint64) if np.asarray(v).dtype != np.uint64 else v
        if pred is None:
            self.r[dst] = v.copy() if v.shape == (self.n,) else np.broadcast_to(v, (self.n,)).copy()
        else:
            old = self.r.get(dst, np.zeros(self.n, np.uint64))
            self.r[dst] = np.where(pred, v, old)

    def addr(self, tok: str) -> np.ndarray:
        m = re.match(r"\[\s*([%\w.]+)\s*(?:\+\s*(-?\w+))?\s*\]", tok.strip())
        if not m:
            raise Unsupported(f"address {tok}")
        base = self.val(m.group(1)) if m.group(1) != "global_smem" else np.zeros(self.n, np.uint64)
        off = int(m.group(2), 0) if m.group(2) else 0
        return base + np.uint64(off & 0xFFFFFFFFFFFFFFFF)

    # -- memory --------------------------------------------------------------------------
    def _buf(self, addr: np.ndarray, nbytes: int, act: np.ndarray):
        out = []
        for a in np.unique(addr[act]):
            i = int(a) // ADDRESS_STRIDE - 1
            if not 0 <= i < len(self.mem) or self.mem[i] is None:
                raise Unsupported(f"global access outside the arguments at {int(a):#x}")
            out.append(i)
        return out

    def gload(self, addr, nbytes, act):
        res = np.zeros(self.n, np.uint64)
        for t in np.nonzero(act)[0]:
            a = int(addr[t])
            buf = self.mem[a // ADDRESS_STRIDE - 1]
            o = a % ADDRESS_STRIDE
            if o + nbytes > len(buf):
                raise Unsupported("global load out of bounds")
            res[t] = int.from_bytes(bytes(buf[o:o + nbytes]), "little")
        return res

    def gstore(self, addr, nbytes, v, act):
        for t in np.nonzero(act)[0]:
            a = int(addr[t])
            buf = self.mem[a // ADDRESS_STRIDE - 1]
            o = a % ADDRESS_STRIDE
            if o + nbytes > len(buf):
                raise Unsupported("global store out of bounds")
            buf[o:o + nbytes] = np.frombuffer(int(v[t]).to_bytes(8, "little")[:nbytes], np.uint8)

    def sload(self, addr, nbytes, act):
        res = np.zeros(self.n, np.uint64)
        for t in np.nonzero(act)[0]:
            o = int(addr[t])
            res[t] = int.from_bytes(bytes(self.smem[o:o + nbytes]), "little")
        return res

    def sstore(self, addr, nbytes, v, act):
        for t in np.nonzero(act)[0]:
            o = int(addr[t])
            self.smem[o:o + nbytes] = np.frombuffer(int(v[t]).to_bytes(8, "little")[:nbytes],
                                                    np.uint8)

    # -- execution -----------------------------------------------------------------------
    def run(self):
        for line in self.body:
            self.step(line)

    def step(self, line: str):
        pred = None
        m = re.match(r"@(!?)(%p\d+)\s+(.*)$", line)
        if m:
            p = self.val(m.group(2)).astype(bool)
            pred = ~p if m.group(1) else p
            line = m.group(3)
        op, _, rest = line.partition(" ")
        ops = split_top(rest.strip().rstrip(";"))
        parts = op.split(".")
        head = parts[0]
        f = getattr(self, "i_" + head, None)
        if f is None:
            raise Unsupported(f"PTX instruction {op}")
        f(parts[1:], ops, pred)

    # integer and predicate instructions
    def i_ret(self, t, o, p):
        pass

    def i_bar(self, t, o, p):
        pass

    def i_fence(self, t, o, p):          # the threads run in lockstep: orderings hold
        pass

    def i_ld(self, t, o, p):
        act = np.ones(self.n, bool) if p is None else p
        space = t[0]
        vec = next((int(x[1:]) for x in t if re.fullmatch(r"v\d", x)), 1)
        width = _bits(t[-1]) // 8
        dsts = [x.strip() for x in o[0].strip("{} ").split(",")]
        if space == "param":
            v = self.params[o[1].strip("[] ")]
            self.put(o[0], np.full(self.n, v, np.uint64), p)
            return
        a = self.addr(o[1])
        load = self.gload if space == "global" else self.sload
        if space not in ("global", "shared"):
            raise Unsupported(f"ld.{space}")
        for k, d in enumerate(dsts):
            if d != "_":
                self.put(d, load(a + np.uint64(k * width), width, act), p)

    def i_st(self, t, o, p):
        act = np.ones(self.n, bool) if p is None else p
        width = _bits(t[-1]) // 8
        srcs = [x.strip() for x in o[1].strip("{} ").split(",")]
        a = self.addr(o[0])
        store = {"global": self.gstore, "shared": self.sstore}.get(t[0])
        if store is None:
            raise Unsupported(f"st.{t[0]}")
        for k, s in enumerate(srcs):
            store(a + np.uint64(k * width), width, self.val(s), act)

    def i_mov(self, t, o, p):
        dst, src = o[0], o[1]
        if dst.startswith("{"):                        # unpack b32 -> two b16
            halves = [x.strip() for x in dst.strip("{}").split(",")]
            v = self.val(src)
            for k, h in enumerate(halves):
                if h != "_":
                    self.put(h, (v >> np.uint64(16 * k)) & np.uint64(0xFFFF), p)
        elif src.startswith("{"):                      # pack
            halves = [x.strip() for x in src.strip("{}").split(",")]
            v = np.zeros(self.n, np.uint64)
            for k, h in enumerate(halves):
                v |= (self.val(h) & np.uint64(0xFFFF)) << np.uint64(16 * k)
            self.put(dst, v, p)
        else:
            self.put(dst, self.val(src), p)

    def _int(self, t, o, p, fn):
        w = _bits(t[-1])
        mask = np.uint64((1 << w) - 1) if w < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
        a = [self.val(x) & mask for x in o[1:]]
        signed = t[-1].startswith("s")
        if signed:
            a = [(x.astype(np.int64) << (64 - w)) >> (64 - w) if w < 64 else x.astype(np.int64)
                 for x in a]
        with np.errstate(over="ignore"):
            r = fn(*a)
        self.put(o[0], np.asarray(r).astype(np.int64).astype(np.uint64) & mask
                 if signed else np.asarray(r).astype(np.uint64) & mask, p)

    def i_and(self, t, o, p):
        if t[-1] == "pred":
            self.put(o[0], self.val(o[1]) & self.val(o[2]), p)
        else:
            self._int(t, o, p, lambda a, b: a & b)

    def i_or(self, t, o, p):
        if t[-1] == "pred":
            self.put(o[0], self.val(o[1]) | self.val(o[2]), p)
        else:
            self._int(t, o, p, lambda a, b: a | b)

    def i_xor(self, t, o, p):
        if t[-1] == "pred":
            self.put(o[0], self.val(o[1]) ^ self.val(o[2]), p)
        else:
            self._int(t, o, p, lambda a, b: a ^ b)

    def i_not(self, t, o, p):
        if t[-1] == "pred":
            self.put(o[0], 1 - self.val(o[1]), p)
        else:
            self._int(t, o, p, lambda a: ~a)

    def i_neg(self, t, o, p):
        if t[-1].startswith(("f", "bf")):       # neg.f32 / f16 / bf16 (x2): the sign bit
            return self._sign(t, o, p, "neg")
        self._int(t, o, p, lambda a: -a)

    def i_abs(self, t, o, p):
        if t[-1].startswith(("f", "bf")):
            return self._sign(t, o, p, "abs")
        self._int(t, o, p, lambda a: np.abs(a))

    def _sign(self, t, o, p, what):
        """neg / abs of floats: exact, the sign bit flipped / cleared (also of NaN; with
        .ftz a subnormal input would flush first: not modelled)."""
        if "ftz" in t:
            raise Unsupported(f"{what}.{'.'.join(t)}")
        ty = t[-1]
        w = {"f64": 64, "f32": 32, "f16": 16, "bf16": 16, "f16x2": 32, "bf16x2": 32}.get(ty)
        if w is None:
            raise Unsupported(f"{what}.{'.'.join(t)}")
        sign = {64: 1 << 63, 32: 1 << 31, 16: 1 << 15}[w]
        if ty.endswith("x2"):
            sign |= 1 << 15
        v = self.val(o[1])
        r = v ^ np.uint64(sign) if what == "neg" else v & ~np.uint64(sign)
        self.put(o[0], r & np.uint64((1 << w) - 1 if w < 64 else 0xFFFFFFFFFFFFFFFF), p)

    def i_rem(self, t, o, p):     # C's remainder (the dividend's sign); by zero: refused
        self._divmod(t, o, p, "rem")

    def i_createpolicy(self, t, o, p):     # an L2 eviction hint: no effect on values
        self.put(o[0], np.zeros(self.n, np.uint64), p)

    def i_prefetch(self, t, o, p):
        pass
    def _divmod(self, t, o, p, what):
        def f(a, b):
            if np.any(b == 0):
                raise Unsupported(f"{what}.{'.'.join(t)} by zero (unspecified in PTX)")
            q = np.abs(a) // np.abs(b) if t[-1].startswith("s") else a // b
            if t[-1].startswith("s"):
                q = np.where((a < 0) != (b < 0), -q, q)
            return q if what == "div" else a - q * b
        self._int(t, o, p, f)

    def i_shl(self, t, o, p):
        self._int(t, o, p, lambda a, b: a << b)

    def i_shr(self, t, o, p):
        self._int(t, o, p, lambda a, b: a >> b)

    def i_sub(self, t, o, p):
        if t[-1].startswith("f"):
            return self._float(t, o, p, "sub")
        self._int(t, o, p, lambda a, b: a - b)

    def i_add(self, t, o, p):
        if t[-1].startswith(("f", "bf")):
            return self._float(t, o, p, "add")
        self._int(t, o, p, lambda a, b: a + b)

    def i_mul(self, t, o, p):
        if t[-1].startswith(("f", "bf")):
            return self._float(t, o, p, "mul")
        if t[0] == "wide":
            a, b = self.val(o[1]) & np.uint64(0xFFFFFFFF), self.val(o[2]) & np.uint64(0xFFFFFFFF)
            if t[-1].startswith("s"):
                a = (a.astype(np.int64) << 32) >> 32
                b = (b.astype(np.int64) << 32) >> 32
            self.put(o[0], (a * b).astype(np.uint64), p)
        else:
            self._int(t, o, p, lambda a, b: a * b)

    def i_mad(self, t, o, p):
        if t[-1].startswith("f"):
            raise Unsupported("mad.f32")
        if t[0] == "wide":
            a, b = self.val(o[1]) & np.uint64(0xFFFFFFFF), self.val(o[2]) & np.uint64(0xFFFFFFFF)
            if t[-1].startswith("s"):
                a = ((a.astype(np.int64) << 32) >> 32).astype(np.uint64)
                b = ((b.astype(np.int64) << 32) >> 32).astype(np.uint64)
            with np.errstate(over="ignore"):
                self.put(o[0], a * b + self.val(o[3]), p)
        else:
            self._int(t, o, p, lambda a, b, c: a * b + c)

    def i_ldmatrix(self, t, o, p):
        """ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: lanes 8i..8i+7 give the
        row addresses of matrix i; lane l receives row l // 4, columns 2(l % 4) and +1 (with
        .trans: rows 2(l % 4) and +1 of column l // 4)."""
        if p is not None or "m8n8" not in t:
            raise Unsupported("ldmatrix." + ".".join(t))
        count = int(next(x for x in t if re.fullmatch(r"x\d", x))[1:])
        dsts = [x.strip() for x in o[0].strip("{} ").split(",")]
        a = self.addr(o[1]).astype(np.int64)
        warp0 = np.arange(self.n) - np.arange(self.n) % 32
        lane = np.arange(self.n) % 32
        for m, d in enumerate(dsts[:count]):
            out = np.zeros(self.n, np.uint64)
            for h in range(2):
                if "trans" in t:
                    row, col = 2 * (lane % 4) + h, lane // 4
                else:
                    row, col = lane // 4, 2 * (lane % 4) + h
                base = a[warp0 + 8 * m + row] + 2 * col
                v = self.smem[base].astype(np.uint64) | (self.smem[base + 1].astype(np.uint64) << np.uint64(8))
                out |= v << np.uint64(16 * h)
            self.put(d, out, None)

    def i_prmt(self, t, o, p):
        """prmt.b32 (default mode): result byte i is byte (c >> 4i) & 7 of {b, a}, or its
        sign replicated when (c >> 4i) & 8."""
        if t != ["b32"]:
            raise Unsupported("prmt." + ".".join(t))
        ab = (self.val(o[1]) & np.uint64(0xFFFFFFFF)) | ((self.val(o[2]) & np.uint64(0xFFFFFFFF)) << np.uint64(32))
        c = self.val(o[3])
        out = np.zeros(self.n, np.uint64)
        for i in range(4):
            sel = (c >> np.uint64(4 * i)) & np.uint64(15)
            byte = (ab >> ((sel & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
            sign = np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0))
            out |= np.where(sel & np.uint64(8), sign, byte) << np.uint64(8 * i)
        self.put(o[0], out, p)

    def i_mma(self, t, o, p):
        """mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 with the PTX ISA's fragments
        (lane l: group g = l // 4, t = l % 4; A regs: (g, 2t), (g + 8, 2t), (g, 2t + 8),
        (g + 8, 2t + 8), each two fp16 along k; B regs: k 2t and 2t + 8, n = g; C / D: (g, 2t),
        (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)).  Only products the checker can compute
        without the matrix unit's model: every output may have one nonzero term (product
        or C) at most, so any accumulation order gives it exactly; otherwise it raises."""
        if p is not None or t[:4] != ["sync", "aligned", "m16n8k16", "row"] \
                or t[-4:] != ["f32", "f16", "f16", "f32"]:
            raise Unsupported("mma." + ".".join(t))
        regs = [[x.strip() for x in op.strip("{} ").split(",")] for op in o[:4]]
        half = lambda v, h: ((v >> np.uint64(16 * h)) & np.uint64(0xFFFF)).astype(  # noqa
            np.uint16).view(np.float16).astype(np.float64)
        lane = np.arange(self.n) % 32
        g, tq = lane // 4, lane % 4
        D = [np.zeros(self.n, np.uint64) for _ in range(4)]
        for w0 in range(0, self.n, 32):
            sl = slice(w0, w0 + 32)
            A = np.zeros((16, 16))
            B = np.zeros((16, 8))
            C = np.zeros((16, 8))
            for i, r in enumerate(regs[1]):
                v = self.val(r)[sl]
                row = g[sl] + 8 * (i % 2)
                col = 2 * tq[sl] + 8 * (i // 2)
                A[row, col], A[row, col + 1] = half(v, 0), half(v, 1)
            for i, r in enumerate(regs[2]):
                v = self.val(r)[sl]
                k = 2 * tq[sl] + 8 * i
                B[k, g[sl]], B[k + 1, g[sl]] = half(v, 0), half(v, 1)
            for i, r in enumerate(regs[3]):
                v = self._f(self.val(r)[sl], "f32").astype(np.float64)
                C[g[sl] + 8 * (i // 2), 2 * tq[sl] + i % 2] = v
            terms = (A != 0).astype(int) @ (B != 0).astype(int) + (C != 0)
            if terms.max() > 1 or not np.all(np.isfinite(A)) or not np.all(np.isfinite(B)):
                raise Unsupported("mma.sync whose outputs sum several terms (that needs the "
                                  "matrix unit's model, not this checker)")
            Dm = (A @ B + C).astype(np.float32)
            for i in range(4):
                val = Dm[g[sl] + 8 * (i // 2), 2 * tq[sl] + i % 2]
                D[i][sl] = val.view(np.uint32).astype(np.uint64)
        for r, v in zip(regs[0], D):
            self.put(r, v, None)

    def i_wgmma(self, t, o, p):
        """``wgmma.mma_async`` of one m64nNk16 tile whose result the caller gives
        (``wgmma=``, an (64, N) array: the checker does not model the operand descriptors);
        each thread's accumulator registers are filled as the PTX ISA lays out the m64nN
        fp32 accumulator: register i of lane l of warp w holds row 16 w + l // 4 +
        8 (i // 2 % 2), column 2 (l % 4) + i % 2 + 8 (i // 4).  fence / commit / wait: no-ops."""
        if t[0] in ("fence", "commit_group", "wait_group"):
            return
        if t[0] != "mma_async" or self.wgmma is None or self.n != 128:
            raise Unsupported("wgmma." + ".".join(t) + " (only one m64nN tile over 4 warps, "
                              "with its result given)")
        X = np.asarray(self.wgmma, np.float32)
        regs = [x.strip() for x in o[0].strip("{} ").split(",")]
        tid = np.arange(self.n)
        w, lane = tid // 32, tid % 32
        for i, r in enumerate(regs):
            row = 16 * w + lane // 4 + 8 * ((i // 2) % 2)
            col = 2 * (lane % 4) + i % 2 + 8 * (i // 4)
            self.put(r, X[row, col].view(np.uint32).astype(np.uint64), p)

    def i_bfe(self, t, o, p):
        w = _bits(t[-1])
        a = self.val(o[1]) & np.uint64((1 << w) - 1)
        pos = self.val(o[2]) & np.uint64(0xFF)
        ln = self.val(o[3]) & np.uint64(0xFF)
        if np.any(pos + ln > w) or np.any(ln == 0):
            raise Unsupported("bfe with a field past the operand")
        v = (a >> pos) & ((np.uint64(1) << ln) - np.uint64(1))
        if t[-1].startswith("s"):          # sign-extend the field
            sign = (v >> (ln - np.uint64(1))) & np.uint64(1)
            v = np.where(sign == 1, v | (np.uint64((1 << w) - 1) ^ ((np.uint64(1) << ln)
                                                                    - np.uint64(1))), v)
        self.put(o[0], v & np.uint64((1 << w) - 1), p)

    def i_setp(self, t, o, p):
        cmp, ty = t[0], t[-1]
        if ty.startswith("f"):
            a, b = (self._f(self.val(x), ty) for x in o[1:3])
        else:
            w = _bits(ty)
            mask = np.uint64((1 << w) - 1) if w < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
            a, b = self.val(o[1]) & mask, self.val(o[2]) & mask
            if ty.startswith("s"):
                a = (a.astype(np.int64) << (64 - w)) >> (64 - w)
                b = (b.astype(np.int64) << (64 - w)) >> (64 - w)
        ordered = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                   "gt": np.greater, "ge": np.greater_equal}
        with np.errstate(invalid="ignore"):
            if cmp in ordered:
                r = ordered[cmp](a, b)
            elif cmp.endswith("u") and cmp[:-1] in ordered and ty.startswith("f"):
                r = ordered[cmp[:-1]](a, b) | np.isnan(a) | np.isnan(b)   # unordered: NaN true
            elif cmp in ("num", "nan") and ty.startswith("f"):
                r = (np.isnan(a) | np.isnan(b)) == (cmp == "nan")
            else:
                raise Unsupported(f"setp.{cmp}")
        self.put(o[0].split("|")[0], r.astype(np.uint64), p)

    def i_selp(self, t, o, p):
        c = self.val(o[3]).astype(bool)
        self.put(o[0], np.where(c, self.val(o[1]), self.val(o[2])), p)

    def i_shfl(self, t, o, p):
        """shfl.sync.{bfly,idx,up,down}.b32 d, a, b, c, membermask (PTX ISA's rule for the
        source lane and its clamp / segment mask)."""
        mode = t[1] if t[0] == "sync" else t[0]
        v = self.val(o[1]).astype(np.int64)
        b = self.val(o[2]).astype(np.int64) & 31
        c = self.val(o[3]).astype(np.int64)
        lane = np.arange(self.n) % 32
        seg = (c >> 8) & 31
        max_lane = (lane & seg) | (c & 31 & ~seg)
        min_lane = lane & seg
        if mode == "bfly":
            j, ok = lane ^ b, (lane ^ b) <= max_lane
        elif mode == "idx":
            j = min_lane | (b & ~seg)
            ok = j <= max_lane
        elif mode == "down":
            j, ok = lane + b, lane + b <= max_lane
        elif mode == "up":
            j, ok = lane - b, lane - b >= max_lane
        else:
            raise Unsupported("shfl." + ".".join(t))
        j = np.where(ok, j, lane)
        src = (np.arange(self.n) - lane) + j
        self.put(o[0], v[src].astype(np.uint64), p)

    def i_cvt(self, t, o, p):
        dst_t, src_t = t[-2], t[-1]
        v = self.val(o[1])
        if dst_t[0] in "us" and src_t[0] in "us" or (dst_t[0] == "b" and dst_t[:2] != "bf"):
            self._int([dst_t], [o[0], o[1]], p, lambda a: a)
            return
        if src_t[0] in "us" and dst_t == "f32" and "rn" in t and _bits(src_t) <= 32:
            w = _bits(src_t)                      # int -> f32: exact in f64, one rounding
            x = (v & np.uint64((1 << w) - 1)).astype(np.int64)
            if src_t[0] == "s":
                x = (x << (64 - w)) >> (64 - w)
            self.put(o[0], self._unf(x.astype(np.float64).astype(np.float32), "f32"), p)
            return
        if dst_t in ("e4m3x2", "e5m2x2") and "satfinite" in t and "rn" in t:
            return self._cvt_fp8(t, o, p)
        x = self._f(v, src_t) if src_t.startswith(("f", "bf")) else None
        if x is None or (dst_t == "f32" and src_t == "f64"):
            raise Unsupported("cvt." + ".".join(t))
        mods = set(t[:-2]) - {"rn"}
        if mods == {"rz"} and dst_t in ("f16", "bf16"):
            import torch

            from .convert import toward_zero
            dt = torch.float16 if dst_t == "f16" else torch.bfloat16
            y = toward_zero(torch.from_numpy(x.astype(np.float32)), dt)
            self.put(o[0], y.view(torch.int16).numpy().view(np.uint16).astype(np.uint64), p)
            return
        if mods:
            raise Unsupported("cvt." + ".".join(t))
        self.put(o[0], self._unf(x.astype(np.float32), dst_t), p)

    def _cvt_fp8(self, t, o, p):
        """cvt.rn.satfinite.{e4m3x2,e5m2x2}.{f32,f16x2}: nearest even, finite overflow and
        infinities to the largest finite value (the PTX ISA); d's upper byte from a (f32:
        the first source; f16x2: the upper half)."""
        import torch

        from .convert import satfinite
        dt = torch.float8_e4m3fn if t[-2] == "e4m3x2" else torch.float8_e5m2
        if t[-1] == "f32":
            hi, lo = (self._f(self.val(x), "f32") for x in o[1:3])
        elif t[-1] == "f16x2":
            v = self.val(o[1])
            lo, hi = self._f(v, "f16"), self._f(v >> np.uint64(16), "f16")
        else:
            raise Unsupported("cvt." + ".".join(t))

        def byte(x):
            y = satfinite(torch.from_numpy(np.asarray(x, np.float32).copy()), dt)
            return y.view(torch.uint8).numpy().astype(np.uint64)
        self.put(o[0], (byte(hi) << np.uint64(8)) | byte(lo), p)

    # floating point
    def _f(self, v, ty):
        if ty in ("f32",):
            return (v & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32)
        if ty == "f16":
            return (v & np.uint64(0xFFFF)).astype(np.uint16).view(np.float16)
        if ty == "bf16":
            return red.bf16_to_f32((v & np.uint64(0xFFFF)).astype(np.uint16))
        if ty == "f64":
            return v.view(np.float64)
        raise Unsupported(f"float type {ty}")

    def _unf(self, x, ty):
        if ty == "f32":
            return red.canonical_nans(x.astype(np.float32)).view(np.uint32).astype(np.uint64)
        if ty == "f16":
            return red.canonical_nans(x.astype(np.float16)).view(np.uint16).astype(np.uint64)
        if ty == "bf16":
            return red.f32_to_bf16(x.astype(np.float32)).astype(np.uint64)
        raise Unsupported(f"float type {ty}")

    def _float(self, t, o, p, what):
        ty = t[-1]
        mods = set(t[:-1]) - {"rn"}
        if mods - {"NaN"} or (what in ("add", "sub", "mul") and mods):
            raise Unsupported(f"{what}.{'.'.join(t)}")
        lanes = 2 if ty.endswith("x2") else 1
        base = ty[:-2] if lanes == 2 else ty
        out = np.zeros(self.n, np.uint64)
        for k in range(lanes):
            sh = np.uint64(16 * k)
            a, b = ((self.val(x) >> sh) if lanes == 2 else self.val(x) for x in o[1:3])
            r = self._op(what, base, a, b, "NaN" in mods)
            out |= (r & np.uint64(0xFFFF if lanes == 2 else 0xFFFFFFFF)) << sh
        self.put(o[0], out, p)

    def _op(self, what, ty, a, b, nan_prop):
        with np.errstate(invalid="ignore", over="ignore"):
            return self._op_(what, ty, a, b, nan_prop)

    def _op_(self, what, ty, a, b, nan_prop):
        if ty == "bf16":
            a16 = (a & np.uint64(0xFFFF)).astype(np.uint16)
            b16 = (b & np.uint64(0xFFFF)).astype(np.uint16)
            if what == "add":
                return red.fadd(a16, b16, "bf16").astype(np.uint64)
            if what in ("max", "min"):
                f = red.fmaximum if nan_prop else red.fmax
                return f(a16, b16, "bf16", what == "max").astype(np.uint64)
            x, y = red.bf16_to_f32(a16), red.bf16_to_f32(b16)
            return red.f32_to_bf16({"sub": x - y, "mul": x * y}[what]).astype(np.uint64)
        x, y = self._f(a, ty), self._f(b, ty)
        if what in ("max", "min"):
            f = red.fmaximum if nan_prop else red.fmax
            return self._unf(f(x, y, ty, what == "max"), ty)
        return self._unf({"add": x + y, "sub": x - y, "mul": x * y}[what], ty)

    def i_div(self, t, o, p):
        """div.rn.f32 (IEEE, correctly rounded) and integer division (toward zero);
        div.full / div.approx are not IEEE."""
        if t[-1][0] in "us":
            return self._divmod(t, o, p, "div")
        if t != ["rn", "f32"]:
            raise Unsupported("div." + ".".join(t))
        a, b = (self._f(self.val(x), "f32") for x in o[1:3])
        with np.errstate(all="ignore"):
            self.put(o[0], self._unf(a / b, "f32"), p)

    def i_max(self, t, o, p):
        if not t[-1].startswith(("f", "bf")):
            return self._int(t, o, p, np.maximum)
        self._float(t, o, p, "max")

    def i_min(self, t, o, p):
        if not t[-1].startswith(("f", "bf")):
            return self._int(t, o, p, np.minimum)
        self._float(t, o, p, "min")

    def i_fma(self, t, o, p):
        """fma.rn.f32 / .bf16 / .bf16x2: a * b + c rounded once (exactly, with rationals;
        sm80 / sm89 add bf16 as fma.rn.bf16x2 a, 1.0, b)."""
        if t not in (["rn", "f32"], ["rn", "bf16"], ["rn", "bf16x2"]):
            raise Unsupported("fma." + ".".join(t))
        if t[1] == "f32":
            self.put(o[0], self._unf(self._fma(*(self._f(self.val(x), "f32")
                                                 for x in o[1:4]), 24, -126), "f32"), p)
            return
        lanes = 2 if t[1] == "bf16x2" else 1
        out = np.zeros(self.n, np.uint64)
        for k in range(lanes):
            sh = np.uint64(16 * k)
            a, b, c = (self._f(self.val(x) >> sh, "bf16") for x in o[1:4])
            out |= self._unf(self._fma(a, b, c, 8, -126), "bf16") << sh
        self.put(o[0], out, p)

    @staticmethod
    def _fma(a, b, c, bits, emin):
        with np.errstate(invalid="ignore", over="ignore"):
            r = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)) \
                .astype(np.float32)           # right for specials and exact zeros
        for k in np.nonzero(np.isfinite(a) & np.isfinite(b) & np.isfinite(c))[0]:
            exact = Fraction(float(a[k])) * Fraction(float(b[k])) + Fraction(float(c[k]))
            if exact != 0:
                r[k] = _round_f32(exact, bits, emin)
        return r


def _round_f32(x: Fraction, bits: int = 24, emin: int = -126) -> np.float32:
    """A nonzero rational rounded to ``bits`` significant bits (fp32: 24; bf16: 8, with
    fp32's exponent range), nearest even, subnormals, overflow to inf; as an fp32."""
    neg, m = x < 0, abs(x)
    e = m.numerator.bit_length() - m.denominator.bit_length()
    if Fraction(2) ** e > m:
        e -= 1
    q = max(e - (bits - 1), emin - (bits - 1))     # the quantum of m's binade
    scaled = m / Fraction(2) ** q
    n, rem = divmod(scaled.numerator, scaled.denominator)
    half = Fraction(rem, scaled.denominator)
    if half > Fraction(1, 2) or (half == Fraction(1, 2) and n % 2 == 1):
        n += 1
    v = float(n) * 2.0 ** q
    with np.errstate(over="ignore"):
        out = np.float32(v) if v < 2.0 ** 128 else np.float32(np.inf)
    return -out if neg else out


