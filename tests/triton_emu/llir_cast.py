"""A tiny evaluator of the straight-line LLVM IR Triton's AMD backend emits for one
elementwise conversion (``y = x.to(T)`` of a 1-D block): the integer / bit operations
between the buffer load and the buffer store, run on NumPy arrays of input bit patterns.
An independent reading of the compiled code for the cast tests (test_triton_casts.py);
the one hardware conversion it meets (``llvm.amdgcn.cvt.pk.fp8.f32`` / ``bf8``) is passed
in by the caller (``hw``), since the IR does not define it."""
import re

import numpy as np

_TY = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "half": 16, "bfloat": 16,
       "float": 32}


def _width(ty):
    ty = ty.strip()
    m = re.match(r"<1 x (\w+)>", ty)
    return _TY[m.group(1) if m else ty]


def _as_float(bits, ty):
    if ty == "float":
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    if ty == "half":
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    if ty == "bfloat":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raise NotImplementedError(ty)


def _signed(v, w):
    v = v.astype(np.int64)
    return np.where(v >= (1 << (w - 1)), v - (1 << w), v) if w < 64 else v


def run(llir: str, x_bits: np.ndarray, hw=None) -> np.ndarray:
    body = llir[llir.index("define amdgpu_kernel"):]
    body = body[body.index("{") + 1:body.index("\n}")]
    env, out = {}, None
    n = len(x_bits)

    def val(tok, w):
        tok = tok.strip()
        if tok.startswith("%"):
            return env[tok]
        if tok in ("true", "false"):
            return np.full(n, tok == "true", np.uint64)
        if tok in ("undef", "poison", "0.000000e+00"):
            return np.zeros(n, np.uint64)
        if tok.startswith("0x"):                            # an fp constant (double hex)
            raise NotImplementedError(tok)
        return np.full(n, int(tok) & ((1 << w) - 1), np.uint64)

    for line in body.splitlines():
        line = line.split(", !dbg")[0].strip()
        if "buffer.load" in line:
            env[line.split(" = ")[0]] = x_bits.astype(np.uint64)
            continue
        if "buffer.store" in line:
            m = re.search(r"store\.\w+\((\w+) (%[\w.]+)", line)
            out = env[m.group(2)]
            continue
        m = re.match(r"(%[\w.]+) = (.*)$", line)
        if not m or "make.buffer" in line:
            continue
        if "workitem" in line:
            env[m.group(1)] = np.zeros(n, np.uint64)
            continue
        dst, rhs = m.groups()
        rhs = re.sub(r"\b(nuw|nsw|exact|samesign|disjoint|tail|fast|nnan|ninf)\b ?", "", rhs)
        op, _, rest = rhs.partition(" ")
        if op in ("lshr", "shl", "and", "or", "xor", "add", "sub", "mul"):
            ty, a, b = re.match(r"(\S+) ([^,]+), (.+)$", rest).groups()
            w = _width(ty)
            a, b = val(a, w), val(b, w)
            r = {"lshr": lambda: a >> b, "shl": lambda: a << b, "and": lambda: a & b,
                 "or": lambda: a | b, "xor": lambda: a ^ b, "add": lambda: a + b,
                 "sub": lambda: a - b, "mul": lambda: a * b}[op]()
            env[dst] = r & np.uint64((1 << w) - 1) if w < 64 else r
        elif op == "select":
            c, ty, a, ty2, b = re.match(r"i1 ([^,]+), (\S+) ([^,]+), (\S+) (.+)$", rest).groups()
            w = _width(ty)
            env[dst] = np.where(val(c, 1) != 0, val(a, w), val(b, w))
        elif op == "icmp":
            pred, ty, a, b = re.match(r"(\w+) (\S+) ([^,]+), (.+)$", rest).groups()
            w = _width(ty)
            a, b = val(a, w), val(b, w)
            if pred[0] == "s":
                a, b = _signed(a, w), _signed(b, w)
            f = {"eq": np.equal, "ne": np.not_equal, "ugt": np.greater, "uge": np.greater_equal,
                 "ult": np.less, "ule": np.less_equal, "sgt": np.greater, "sge": np.greater_equal,
                 "slt": np.less, "sle": np.less_equal}[pred]
            env[dst] = f(a, b).astype(np.uint64)
        elif op == "fcmp":
            pred, ty, a, b = re.match(r"(\w+) (\S+) ([^,]+), (.+)$", rest).groups()
            a = _as_float(val(a, 32), ty)
            if b.strip().startswith("%"):
                b = _as_float(val(b, 32), ty)
            elif pred in ("uno", "ord") and b.strip() in ("0.000000e+00", "0xH0000", "0xR0000"):
                b = np.float64(0.0)
            else:
                raise NotImplementedError(f"fcmp constant {b}")
            with np.errstate(invalid="ignore"):
                r = {"uno": np.isnan(a) | np.isnan(b), "ord": ~(np.isnan(a) | np.isnan(b))}[pred]
            env[dst] = r.astype(np.uint64)
        elif op in ("trunc", "zext", "bitcast"):
            ty, a, ty2 = re.match(r"(.+?) ([%\w.]+) to (.+)$", rest).groups()
            w2 = _width(ty2)
            env[dst] = val(a, _width(ty)) & np.uint64((1 << w2) - 1)
        elif op == "sext":
            ty, a, ty2 = re.match(r"(.+?) ([%\w.]+) to (.+)$", rest).groups()
            w, w2 = _width(ty), _width(ty2)
            env[dst] = _signed(val(a, w), w).astype(np.uint64) & np.uint64((1 << w2) - 1)
        elif op == "extractelement":
            env[dst] = val(re.match(r"<1 x \w+> ([%\w.]+)", rest).group(1), 32)
        elif op in ("fpext", "fptrunc"):
            ty, a, ty2 = re.match(r"(\w+) ([%\w.]+) to (\w+)$", rest).groups()
            x = _as_float(val(a, 32), ty)
            with np.errstate(over="ignore"):
                y = x.astype({"float": np.float32, "half": np.float16}[ty2])
            env[dst] = y.view({"float": np.uint32, "half": np.uint16}[ty2]).astype(np.uint64)
        elif op == "call":
            m2 = re.match(r"(\S+) @([\w.]+)\((.*)\)$", rest)
            rty, name, args = m2.groups()
            args = [a.strip().split(" ", 1) for a in re.split(r",(?![^<]*>)", args)]
            w = _width(rty)
            if name.startswith("llvm.fabs"):
                env[dst] = val(args[0][1], w) & np.uint64((1 << (w - 1)) - 1)
            elif name.startswith(("llvm.umax", "llvm.umin", "llvm.usub.sat")):
                a, b = val(args[0][1], w), val(args[1][1], w)
                env[dst] = (np.maximum(a, b) if "umax" in name else np.minimum(a, b)
                            if "umin" in name else np.where(a > b, a - b, 0).astype(np.uint64))
            elif name.startswith("llvm.amdgcn.cvt.pk."):
                if hw is None:
                    raise NotImplementedError(name)
                fmt = "fp8" if ".fp8." in name else "bf8"
                old = val(args[2][1], 32)
                lo = [hw(fmt, val(args[k][1], 32).astype(np.uint32).view(np.float32))
                      for k in (0, 1)]
                word = np.asarray(lo[0], np.uint64) | (np.asarray(lo[1], np.uint64) << 8)
                if args[3][1].strip() == "true":               # the high word
                    env[dst] = (old & np.uint64(0xFFFF)) | (word << np.uint64(16))
                else:
                    env[dst] = (old & np.uint64(0xFFFF0000)) | word
            else:
                raise NotImplementedError(name)
        else:
            raise NotImplementedError(f"{op}: {line}")
    return out
