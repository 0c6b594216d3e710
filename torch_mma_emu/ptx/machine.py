"""SIMT execution of a kernel's grid, one CTA at a time (CTAs in linear order, x fastest,
or another ``cta_order`` of the launch), all threads of a CTA vectorised with NumPy: every
register is a uint64 array over the threads, an instruction runs on the threads its mask
selects.

Scheduling: minimum-PC.  Each thread has its own PC; every step runs the instruction at the
smallest PC among the CTA's threads that are neither finished nor waiting at a barrier, on
all threads at that PC.  Divergent paths therefore run one after the other and reconverge at
the first instruction both reach (the immediate post-dominator for the code nvcc emits),
loops iterate until the last thread leaves, and ``bar.sync`` parks threads until every
unfinished thread of the CTA is parked.  Atomics (``atom`` / ``red``) of one instruction
apply in ascending thread order (``order="reverse"`` or an int seed for a shuffled order
try others); CTAs never overlap, so memory fences are no-ops."""
from __future__ import annotations

import re

import numpy as np

from . import alu, alu_float as af, carry, fround as fr
from .errors import PTXError, StepBudget, Unsupported
from .memory import LOCAL_WIN, SHARED_WIN
from .tensor_core import TENSOR
from .warp import WARP

U64 = np.uint64
_ADDR = re.compile(r"^\[\s*([%\w$.]+)\s*(?:([+-])\s*(-?\w+))?\s*\]$")
NOOPS = {"membar", "fence", "nanosleep", "prefetch", "prefetchu", "griddepcontrol",
         "pmevent", "discard", "applypriority", "createpolicy"}


def imm(tok: str):
    t = tok.strip()
    if t[:2] in ("0f", "0F", "0d", "0D"):
        return int(t[2:], 16)
    t = t.rstrip("Uu")
    return int(t, 0) & 0xFFFFFFFFFFFFFFFF


class CTA:
    def __init__(self, launch, ctaid):
        self.L, self.k = launch, launch.kernel
        bx, by, bz = launch.block
        self.n = n = bx * by * bz
        t = np.arange(n)
        tx, ty, tz = t % bx, (t // bx) % by, t // (bx * by)
        self.ctaid = ctaid
        self.r = {}
        spec = {"%tid.x": tx, "%tid.y": ty, "%tid.z": tz, "%laneid": t % 32,
                "%warpid": t // 32, "%nwarpid": np.full(n, (n + 31) // 32),
                "%lanemask_eq": 1 << (t % 32), "%lanemask_lt": (1 << (t % 32)) - 1,
                "%lanemask_le": (2 << (t % 32)) - 1,
                "%lanemask_gt": 0xFFFFFFFF ^ ((2 << (t % 32)) - 1),
                "%lanemask_ge": 0xFFFFFFFF ^ ((1 << (t % 32)) - 1),
                "%smid": 0, "%nsmid": 1, "%gridid": 0, "%clock": 0, "%clock64": 0,
                "%dynamic_smem_size": launch.dynamic_smem,
                "%total_smem_size": launch.smem_size}
        for a, (b, g, c) in zip("xyz", zip(launch.block, launch.grid, ctaid)):
            spec[f"%ntid.{a}"], spec[f"%nctaid.{a}"], spec[f"%ctaid.{a}"] = b, g, c
        for name, v in spec.items():
            self.r[name] = np.broadcast_to(np.asarray(v, np.int64).astype(U64), (n,)).copy()
        self.mem = launch.mem
        self.consts = {}

    def who(self, t):
        bx, by, _ = self.L.block
        return (f"tid ({t % bx}, {(t // bx) % by}, {t // (bx * by)}) of CTA "
                f"{tuple(self.ctaid)}")

    # -- operands ------------------------------------------------------------------
    def val(self, tok: str) -> np.ndarray:
        v = self.r.get(tok)
        if v is not None:
            return v
        c = self.consts.get(tok)
        if c is None:
            if tok.startswith("%"):
                if tok.split(".")[0] in ("%envreg0", "%pm0") or tok.startswith(("%nctaid",)):
                    raise Unsupported(f"special register {tok}")
                return np.zeros(self.n, U64)        # never written: 0 here
            if tok in self.L.symbols:
                c = np.full(self.n, self.L.symbols[tok][1], U64)
            elif tok == "WARP_SZ":                  # PTX's run-time constant: 32
                c = np.full(self.n, 32, U64)
            else:
                try:
                    c = np.full(self.n, imm(tok), U64)
                except ValueError:
                    raise Unsupported(f"{self.k.name}: operand {tok!r}") from None
            self.consts[tok] = c
        return c

    def put(self, dst: str, v, act):
        v = np.asarray(v)
        if v.dtype != U64:
            v = v.astype(U64)
        if act is None or act.all():
            self.r[dst] = np.broadcast_to(v, (self.n,)).copy()
        else:
            old = self.r.get(dst)
            self.r[dst] = np.where(act, v, U64(0) if old is None else old)

    def address(self, tok: str):
        """[base + off] -> (symbol space or None, address array)."""
        m = _ADDR.match(tok.strip())
        if not m:
            raise Unsupported(f"{self.k.name}: address operand {tok!r}")
        base, sign, off = m.groups()
        o = 0 if off is None else int(off, 0) * (-1 if sign == "-" else 1)
        space = self.L.symbols.get(base, (None,))[0]
        return space, self.val(base) + U64(o & 0xFFFFFFFFFFFFFFFF)

    # -- memory instructions ---------------------------------------------------------
    def access(self, parts, o, act, store):
        spaces = [p for p in parts[1:] if p in ("global", "shared", "local", "param", "const")]
        space = spaces[0] if spaces else None
        vec = next((int(p[1:]) for p in parts if re.fullmatch(r"v[248]", p)), 1)
        t = parts[-1]
        w = alu.width(t) // 8
        regs = [x.strip() for x in (o[1] if store else o[0]).strip("{} ").split(",")]
        sym_space, a = self.address(o[0] if store else o[1])
        if sym_space == "callparam":
            if store:       # the arguments of a call: the only callee run is __assertfail
                return
            raise Unsupported("ld.param of a call's return value (device-function calls)")
        if space == "param" or sym_space == "param":
            if store:
                raise Unsupported("st.param (device-function calls)")
            blob = self.L.param_blob
            off = int(a[0])
            for k, d in enumerate(regs):
                raw = int.from_bytes(bytes(blob[off + k * w: off + (k + 1) * w]), "little")
                self.put(d, np.full(self.n, self._ext(raw, t, w), U64), act)
            return
        if space == "const":
            raise Unsupported("ld.const (module .const variables)")
        if space in ("shared", "local"):         # window offsets: 32-bit arithmetic wraps
            a = a & U64(0xFFFFFFFF)
        where = [(space, a, act)] if space else self.mem.split_generic(a, act)
        for sp, addr, msk in where:
            for k, d in enumerate(regs):
                ak = addr + U64(k * w)
                if store:
                    if d != "_":
                        self.mem.write(sp, ak, w, self.val(d), msk, self.who)
                elif d != "_":
                    v = self.mem.read(sp, ak, w, msk, self.who)
                    if t[0] == "s" and w < 8:
                        v = alu.signed(v, 8 * w).astype(U64)
                    self.put(d, v, msk)

    @staticmethod
    def _ext(raw, t, w):
        if t[0] == "s" and raw >> (8 * w - 1):
            raw -= 1 << (8 * w)
        return raw & 0xFFFFFFFFFFFFFFFF

    def atom(self, parts, o, act, red):
        q = [p for p in parts[1:] if p not in alu.IGNORED]
        space = q[0] if q[0] in ("global", "shared") else None
        q = q[1:] if space else q
        op, t = q[0], q[-1]
        if op not in _ATOM or (op == "add" and t not in ("u32", "s32", "u64", "f32", "f64")):
            raise Unsupported(".".join(parts))
        w = alu.width(t) // 8
        args = o[1:] if red else o[2:]
        sym_space, a = self.address(o[0] if red else o[1])
        space = space or sym_space
        b = self.val(args[0])
        c = self.val(args[1]) if len(args) > 1 else None
        old_all = np.zeros(self.n, U64)
        one = np.ones(1, bool)
        for th in self.L.atomic_order(np.nonzero(act)[0]):
            a1 = a[th:th + 1]
            who = lambda _t, th=th: self.who(th)  # noqa: E731
            where = [(space, a1, one)] if space else self.mem.split_generic(a1, one)
            for sp, addr, msk in where:
                old = self.mem.read(sp, addr, w, msk, who)[0]
                new = _ATOM[op](int(old), int(b[th]), None if c is None else int(c[th]), t)
                val = np.array([new & ((1 << (8 * w)) - 1)], U64)
                self.mem.write(sp, addr, w, val, msk, who)
                old_all[th] = old
        if not red:
            self.put(o[0], old_all, act)


def _sx(v, t):
    b = alu.width(t)
    return v - (1 << b) if t[0] == "s" and v >> (b - 1) else v


def _fadd(x, y, t):
    f = "f32" if t == "f32" else "f64"
    a, b = (fr.from_bits(np.array([z], U64), f) for z in (x, y))
    if f == "f32":
        a, b = fr.flush(a, f), fr.flush(b, f)
    s, e = fr.two_sum(a, b)
    r = fr.round_to(s, e, f, "rn") if f == "f32" else s
    return int(fr.to_bits(fr.flush(r, f) if f == "f32" else r, f)[0])


_ATOM = {
    "add": lambda x, y, c, t: _fadd(x, y, t) if t[0] == "f" else x + y,
    "min": lambda x, y, c, t: min(_sx(x, t), _sx(y, t)), "max": lambda x, y, c, t: max(_sx(x, t), _sx(y, t)),
    "and": lambda x, y, c, t: x & y, "or": lambda x, y, c, t: x | y,
    "xor": lambda x, y, c, t: x ^ y, "exch": lambda x, y, c, t: y,
    "cas": lambda x, y, c, t: c if x == y else x,
    "inc": lambda x, y, c, t: 0 if x >= y else x + 1,
    "dec": lambda x, y, c, t: y if x == 0 or x > y else x - 1,
}


def run_cta(cta: CTA, budget: list) -> int:
    """Run one CTA to its end; returns the thread-instructions executed."""
    k = cta.k
    body, labels = k.body, k.labels
    n = cta.n
    pc = np.zeros(n, np.int64)
    done = np.zeros(n, bool)
    waiting = np.zeros(n, bool)
    count = 0
    end = len(body)
    while True:
        live = ~done & ~waiting
        if not live.any():
            if waiting.any():                    # everyone unfinished is at a barrier
                pc[waiting] += 1
                waiting[:] = False
                continue
            return count
        p = pc[live].min()
        if p >= end:
            done |= live & (pc >= end)
            continue
        mask = live & (pc == p)
        budget[0] -= 1
        if budget[0] < 0:
            raise StepBudget(f"{k.name}: more than the step budget of scheduler steps "
                             f"(CTA {tuple(cta.ctaid)}, PC {p}: {body[p].op})")
        ins = body[p]
        act = mask
        if ins.guard is not None:
            g = (cta.val(ins.guard) & U64(1)).astype(bool)
            act = mask & (~g if ins.neg else g)
        k_act = int(act.sum())
        count += k_act
        if k_act:
            cta.L.executed[ins.op] += k_act
        head = ins.parts[0]
        try:
            if head == "bra":
                tgt = labels.get(ins.ops[0])
                if tgt is None:
                    raise Unsupported(f"{k.name}: branch target {ins.ops[0]!r}")
                pc[mask] = np.where(act[mask], tgt, p + 1)
                continue
            if head in ("trap", "brkpt") and act.any():
                t = int(np.argmax(act))
                raise PTXError(f"{k.name}: {head} executed by thread {cta.who(t)}")
            if head in ("ret", "exit"):
                done |= act
                pc[mask & ~act] += 1
                continue
            if head in ("bar", "barrier") and ins.parts[-1] != "arrive" and "arrive" not in ins.parts:
                waiting |= act
                pc[mask & ~act] += 1
                continue
            if act.any():
                execute(cta, ins, act)
        except PTXError as e:
            if str(e).startswith(k.name):
                raise
            raise type(e)(f"{k.name} line {ins.line} `{ins.op}`: {e}") from None
        pc[mask] += 1


def execute(cta, ins, act):
    parts, o, head = ins.parts, ins.ops, ins.parts[0]
    if head in ("ld", "ldu"):
        return cta.access(parts, o, act, False)
    if head == "st":
        return cta.access(parts, o, act, True)
    if head in ("atom", "red"):
        return cta.atom(parts, o, act, head == "red")
    if head == "cvta":
        v = cta.val(o[1])
        if "shared" in parts:
            v = v - U64(SHARED_WIN) if "to" in parts else v + U64(SHARED_WIN)
        elif "local" in parts:
            v = v - U64(LOCAL_WIN) if "to" in parts else v + U64(LOCAL_WIN)
        elif "global" not in parts:
            raise Unsupported(ins.op)
        return cta.put(o[0], v & alu.mask_of(alu.width(parts[-1])), act)
    if head in NOOPS or (head == "bar" and "arrive" in parts):
        return None
    if head == "cp":
        return _cp_async(cta, parts, o, act)
    if head == "call":
        return _call(cta, o, act)
    h = (carry.handler(parts) or WARP.get(head) or alu.HANDLERS.get(head) or af.FLOAT.get(head)
         or TENSOR.get(head))
    if h is None:
        raise Unsupported(f"PTX instruction {ins.op} (not modelled)")
    h(cta, parts, o, act)


ASSERT_FUNCS = ("__assertfail", "__assert_fail")


def _call(cta, o, act):
    """``call`` of CUDA's device-assert function (``CUDA_KERNEL_ASSERT``, ``assert``): the
    assertion failed, an error naming the thread; other callees are not modelled."""
    callee = next((x for x in o if not x.startswith("(")), "")
    if callee in ASSERT_FUNCS:
        t = int(np.argmax(act))
        raise PTXError(f"{cta.k.name}: device assertion failed ({callee} called) in thread "
                       f"{cta.who(t)}")
    raise Unsupported(f"call of device function {callee!r} (not modelled)")


def _cp_async(cta, parts, o, act):
    """cp.async.{ca,cg}.shared.global [dst], [src], size{, src_size}: the copy happens at
    once (commit / wait groups are no-ops); bytes past src_size are zero."""
    if parts[1] != "async":
        raise Unsupported(".".join(parts))
    if any(p in ("commit_group", "wait_group", "wait_all") for p in parts):
        return
    size = int(o[2], 0)
    src_size = cta.val(o[3]) if len(o) > 3 else np.full(cta.n, size, U64)
    _, dst = cta.address(o[0])
    _, src = cta.address(o[1])
    for j in range(0, size, 4):
        keep = act & (U64(j) < src_size)
        v = cta.mem.read("global", src + U64(j), 4, keep, cta.who)
        cta.mem.write("shared", dst + U64(j), 4, v, act, cta.who)
