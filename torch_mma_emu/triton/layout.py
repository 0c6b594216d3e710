"""The layouts the real compile gives a launch's reductions, read from the TTGIR that
Triton compiles on the CPU (no GPU needed: ``ASTSource`` -> ttir -> ttgir -> llir -> ptx all
run on the host).

A launch is specialised exactly as Triton's launcher does it (``JITFunction``'s binder with
the target backend: 16-byte pointer alignment and integer divisibility by 16, constexprs,
``num_warps``, ``num_ctas``), so an aligned and an unaligned pointer can give the same
``tl.sum`` two layouts (256 fp32 over 4 warps: ``sizePerThread=[2]`` aligned, ``[1]``
unaligned) and so two different results.  Compiles are cached per kernel, target and
specialisation.  Each ``tt.reduce`` of the TTGIR becomes a :class:`ReduceSite`: where it is
in the source (its MLIR call-site chain of ``file:line``), its axis, operand shape, element
types, combine operations and the operand's layout, as a linear layout (one coordinate
offset per register / lane / warp bit; coordinates of a slot are the XOR of its bits'
offsets, Triton's ``LinearLayout`` convention).
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

from ..text_table import split_top

_CACHE: "OrderedDict" = OrderedDict()   # specialisation -> Compiled, least recent first
_CACHE_SIZE = 256
_BINDERS: dict = {}          # (fn, target) -> (JITFunction, backend, Triton's binder)
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Bases:
    """A distributed layout of one tensor shape: coordinate offsets of each register, lane
    and warp bit (a zero offset: the bit broadcasts, e.g. a layout wider than the shape)."""
    shape: tuple
    reg: tuple
    lane: tuple
    warp: tuple


@dataclass
class ReduceSite:
    """One ``tt.reduce`` or ``tt.scan`` of the TTGIR."""
    frames: tuple            # ((file, line), ...) innermost first
    axis: int
    shape: tuple
    types: tuple             # element types of the operands ("f32", "f16", "i32", ...)
    ops: tuple               # combine-region operations ("arith.addf", ...)
    encoding: str            # the operand's layout, as written in the TTGIR
    bases: Optional[Bases] = None
    why_not: str = ""        # set when the layout is not modelled
    tree: object = None      # reduce.Tree, made at first use
    kind: str = "reduce"     # or "scan" (tt.scan)
    reverse: bool = False    # a reverse scan


@dataclass
class Compiled:
    ttgir: str
    ptx: str = ""
    llir: str = ""
    reduces: list = field(default_factory=list)
    num_warps: int = 4
    attrs: dict = field(default_factory=dict)
    runtime_args: tuple = ()     # names of the parameters the compiled kernel takes
    target: str = ""             # "cuda:90", "hip:gfx942", ...
    shared: int = 0              # dynamic shared memory bytes (the compiled metadata's)
    scratch: tuple = (0, 0)      # global / profile scratch bytes per CTA (metadata)


def target_of(arch: str):
    """The ``GPUTarget`` Triton compiles for on ``arch`` (None: not an NVIDIA arch)."""
    from triton.backends.compiler import GPUTarget
    from .target_rules import gpu_target
    t = gpu_target(arch)
    return GPUTarget(*t) if t[0] == "cuda" else None


def gpu_target_of(fields: tuple):
    """Triton's ``GPUTarget`` of ``target_rules.gpu_target``'s fields."""
    from triton.backends.compiler import GPUTarget
    return GPUTarget(*fields)


def amd_target_of(arch: str):
    """The ``GPUTarget`` Triton compiles for on an AMD ``arch``, None otherwise."""
    from triton.backends.compiler import GPUTarget
    from .target_rules import gpu_target
    t = gpu_target(arch)
    return GPUTarget(*t) if t[0] == "hip" else None


def _jit_of(fn):
    """The kernel as a ``JITFunction`` with the launcher's specialisation options: the
    one the user launched (``remember``), or one made with an ``InterpretedFunction``'s
    ``do_not_specialize`` options."""
    from triton.runtime.jit import JITFunction
    j = _JITS.get(fn)
    if j is None:
        kw = {k: v for k, v in _OPTS.get(fn, {}).items()
              if k in ("do_not_specialize", "do_not_specialize_on_alignment")}
        j = _JITS[fn] = JITFunction(fn, **kw)
    return j


def remember(kernel) -> None:
    """Note the launched kernel object, so its specialisation options are the compile's."""
    from triton.runtime.jit import JITFunction
    fn = getattr(kernel, "fn", None)
    if fn is None or fn in _JITS:
        return
    if isinstance(kernel, JITFunction):
        _JITS[fn] = kernel
    else:
        _OPTS[fn] = dict(getattr(kernel, "kwargs", {}) or {})


_JITS: dict = {}
_OPTS: dict = {}


def compile_launch(fn, args, kwargs, target, *, ptx: bool = False) -> Compiled:
    """The TTGIR (and with ``ptx`` the LLVM IR and PTX) Triton compiles ``fn`` to for this
    launch's arguments on ``target``; cached per specialisation."""
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature
    import triton._C.libtriton as lt
    jf = _jit_of(fn)
    bkey = (fn, str(target))
    with _LOCK:
        hit = _BINDERS.get(bkey)
    if hit is None or hit[0] is not jf:
        backend = make_backend(target)
        hit = (jf, backend, create_function_from_signature(jf.signature, jf.params, backend))
        with _LOCK:
            _BINDERS[bkey] = hit
    _, backend, binder = hit
    kw = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    bound, spec, opts = binder(*args, **kw)
    key = (fn, str(target), str(spec), str(sorted((k, str(v)) for k, v in kw.items())), ptx)
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
    if hit is not None:
        return hit
    options, signature, constexprs, attrs = jf._pack_args(backend, kw, bound, spec, opts)
    src = ASTSource(jf, signature, constexprs, attrs)
    stages: dict = {}
    backend.add_stages(stages, options, src.language)
    ctx = lt.ir.context()
    lt.ir.load_dialects(ctx)
    backend.load_dialects(ctx)
    mod = src.make_ir(target, options, backend.get_codegen_implementation(options),
                      backend.get_module_map(), ctx)
    texts, meta = {}, {}
    for name, stage in stages.items():
        if name in ("cubin", "hsaco") or (not ptx and name in ("llir", "ptx")):
            break
        mod = stage(mod, meta)
        texts[name] = mod if isinstance(mod, str) else str(mod)
    out = Compiled(texts["ttgir"], texts.get("ptx", ""), texts.get("llir", ""),
                   num_warps=options.num_warps, attrs=attrs,
                   runtime_args=tuple(k for k, v in signature.items() if v != "constexpr"),
                   target=f"{target.backend}:{target.arch}",
                   shared=int(meta.get("shared", 0) or 0),
                   scratch=(int(meta.get("global_scratch_size", 0) or 0),
                            int(meta.get("profile_scratch_size", 0) or 0)))
    out.reduces = parse_reduces(out.ttgir, out.num_warps)
    with _LOCK:
        _CACHE[key] = out
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return out


# -- TTGIR text ----------------------------------------------------------------------------
_LOC_DEF = re.compile(r"^(#loc\d*) = loc\((.*)\)\s*$", re.M)
_ALIAS = re.compile(r"^(#[\w]+) = (#ttg\.\w+<.*>)\s*$", re.M)
_FILE_LOC = re.compile(r'^"([^"]*)":(\d+):\d+$')
_CALLSITE = re.compile(r"^callsite\((#loc\d*|.*?) at (#loc\d*|.*)\)$")
_NAMED = re.compile(r'^"[^"]*"\((#loc\d*)\)$')


def _frames(ref: str, defs: dict, depth: int = 0) -> list:
    """A location as (file, line) frames, innermost first."""
    if depth > 64:
        return []
    ref = ref.strip()
    if ref.startswith("loc(") and ref.endswith(")"):
        ref = ref[4:-1]
    if ref.startswith("#loc"):
        return _frames(defs.get(ref, "unknown"), defs, depth + 1)
    m = _FILE_LOC.match(ref)
    if m:
        return [(m.group(1), int(m.group(2)))]
    m = _CALLSITE.match(ref)
    if m:
        return _frames(m.group(1), defs, depth + 1) + _frames(m.group(2), defs, depth + 1)
    m = _NAMED.match(ref)
    if m:
        return _frames(m.group(1), defs, depth + 1)
    return []


_TENSOR = re.compile(r"^tensor<([\dx]+)x(\w+), (.*)>$")


def parse_reduces(ttgir: str, num_warps: int) -> list:
    defs = {m.group(1): m.group(2) for m in _LOC_DEF.finditer(ttgir)}
    aliases = {m.group(1): m.group(2) for m in _ALIAS.finditer(ttgir)}
    sites = []
    lines = ttgir.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.search(r'"tt\.(reduce|scan)"\((.*?)\) <\{axis = (\d+) : i32(, reverse = '
                      r'(true|false))?\}>', line)
        if not m:
            i += 1
            continue
        ops, j, start = [], i + 1, i
        while not lines[j].lstrip().startswith("})"):
            op = re.search(r"=\s*([a-z_]+\.[a-z_.]+)", lines[j])
            if op:
                ops.append(op.group(1))
            j += 1
        tail = re.match(r"^\s*\}\) : \((.*)\) -> (.*) loc\((.*)\)\s*$", lines[j])
        i = j + 1
        if not tail:
            continue
        types = split_top(tail.group(1), "<>()[]{}")
        t = _TENSOR.match(types[0])
        if not t:
            continue
        shape = tuple(int(x) for x in t.group(1).split("x"))
        enc = t.group(3).strip()
        enc = aliases.get(enc, enc)
        elems = tuple(_TENSOR.match(x).group(2) for x in types if _TENSOR.match(x))
        site = ReduceSite(tuple(_frames(tail.group(3), defs)), int(m.group(3)), shape, elems,
                          tuple(ops), enc, kind=m.group(1), reverse=m.group(5) == "true")
        try:
            operand = re.search(r'"tt\.(?:reduce|scan)"\((%[\w.#]+)', line)
            site.bases = _traced_bases(operand.group(1) if operand else "", enc, shape,
                                       aliases, lines[:start])
        except NotImplementedError as e:
            site.why_not = str(e)
        sites.append(site)
    return sites


_RESHAPE = re.compile(r"^\s*(%[\w.#]+) = tt\.reshape (%[\w.#]+)((?: allow_reorder| "
                      r"efficient_layout)*) : (tensor<[^>]*>) -> (tensor<[^>]*>)")


def _traced_bases(name: str, enc: str, shape: tuple, aliases: dict, before: list) -> Bases:
    """The layout of a reduction operand as element positions, register by register.

    A ``tt.reshape ... allow_reorder`` (what ``tl.sum(x)`` without an axis and
    ``tl.reshape(x, s, can_reorder=True)`` compile to) is lowered as a no-op on registers:
    register i of a thread in the result is register i of that thread in the source, the
    result layout naming no element at all.  So the slots are followed back through such
    reshapes to the last layout that does place the elements (a value-preserving op:
    ``convert_layout`` moves values to where its result layout says), and the source
    coordinates are flattened row-major (the interpreter's reshape) into the result's
    shape: for power-of-two shapes a bit concatenation, so the XOR offsets carry over."""
    for k in range(len(before) - 1, -1, -1):
        if not before[k].lstrip().startswith(name + " = "):
            continue
        m = _RESHAPE.match(before[k])
        if not m or "allow_reorder" not in m.group(3):
            break
        src_t = _TENSOR.match(m.group(4))
        if not src_t:
            break
        src_shape = tuple(int(x) for x in src_t.group(1).split("x"))
        src_enc = aliases.get(src_t.group(3).strip(), src_t.group(3).strip())
        src = _traced_bases(m.group(2), src_enc, src_shape, aliases, before[:k])
        dst = bases_of(enc, shape, aliases)
        if (len(src.reg), len(src.lane), len(src.warp)) != \
                (len(dst.reg), len(dst.lane), len(dst.warp)):
            raise NotImplementedError(f"a reordering reshape from {len(src.reg)} to "
                                      f"{len(dst.reg)} registers per thread")
        move = lambda v: _unflatten(_flatten(v, src_shape), shape)  # noqa: E731
        keep = lambda s, d: tuple(move(v) if any(w) else w for v, w in zip(s, d))  # noqa
        return Bases(tuple(shape), tuple(move(v) for v in src.reg), keep(src.lane, dst.lane),
                     keep(src.warp, dst.warp))
    return bases_of(enc, shape, aliases)


def _flatten(v: tuple, shape: tuple) -> int:
    out = 0
    for c, n in zip(v, shape):
        out = out * n + c
    return out


def _unflatten(i: int, shape: tuple) -> tuple:
    out = []
    for n in reversed(shape):
        out.append(i % n)
        i //= n
    return tuple(reversed(out))


# -- layouts as register / lane / warp bit offsets -------------------------------------------
def _ints(text: str, name: str) -> list:
    m = re.search(name + r" = \[([\d, ]*)\]", text)
    if not m:
        raise NotImplementedError(f"layout without {name}: {text}")
    return [int(x) for x in m.group(1).split(",") if x.strip()]


def _log2(n: int) -> int:
    if n <= 0 or n & (n - 1):
        raise NotImplementedError(f"non-power-of-two layout size {n}")
    return n.bit_length() - 1


def _blocked(enc: str, shape: tuple) -> Bases:
    spt, tpw = _ints(enc, "sizePerThread"), _ints(enc, "threadsPerWarp")
    wpc, order = _ints(enc, "warpsPerCTA"), _ints(enc, "order")
    if "CTAsPerCGA" in enc and any(x != 1 for x in _ints(enc, "CTAsPerCGA")):
        raise NotImplementedError("multi-CTA (num_ctas > 1) layouts are not modelled")
    rank = len(shape)

    def unit(d, v):
        # an offset along d wider than the shape broadcasts (Triton's shape fitting)
        return tuple((v if v < shape[d] else 0) if k == d else 0 for k in range(rank))

    reg, lane, warp = [], [], []
    for d in order:
        reg += [unit(d, 1 << b) for b in range(_log2(spt[d]))]
    for d in order:
        lane += [unit(d, spt[d] << b) for b in range(_log2(tpw[d]))]
    for d in order:
        warp += [unit(d, spt[d] * tpw[d] << b) for b in range(_log2(wpc[d]))]
    for d in order:            # repetitions of the CTA tile: further registers
        tile = spt[d] * tpw[d] * wpc[d]
        reps = max(1, shape[d] // tile)
        reg += [unit(d, tile << b) for b in range(_log2(reps))]
    return Bases(tuple(shape), tuple(reg), tuple(lane), tuple(warp))


def _mma(enc: str, shape: tuple) -> Bases:
    """The accumulator of ``mma.sync`` (version 2: m16n8 per warp) and ``wgmma`` (version 3:
    m64nN per warp group, 16 rows per warp): register i of lane l holds row l // 4 +
    8 * (i // 2 % 2), column 2 * (l % 4) + i % 2 + 8 * (i // 4) (the PTX ISA's fragment
    layouts); warps tile M, then N; repetitions of the tile are further registers."""
    major = int(re.search(r"versionMajor = (\d+)", enc).group(1))
    wpc, instr = _ints(enc, "warpsPerCTA"), _ints(enc, "instrShape")
    if major not in (2, 3) or len(shape) != 2:
        raise NotImplementedError(f"reductions over {enc} are not modelled (2-D mma v2 / v3 "
                                  "are)")
    n_instr = instr[1] if major == 3 else 8

    def unit(d, v):
        return tuple((v if v < shape[d] else 0) if k == d else 0 for k in range(2))
    reg = [unit(1, 1), unit(0, 8)] + [unit(1, 8 << b) for b in range(_log2(n_instr // 8))]
    lane = [unit(1, 2), unit(1, 4), unit(0, 1), unit(0, 2), unit(0, 4)]
    warp = [unit(0, 16 << b) for b in range(_log2(wpc[0]))]
    warp += [unit(1, n_instr << b) for b in range(_log2(wpc[1]))]
    tile = (16 * wpc[0], n_instr * wpc[1])
    for d in (1, 0):
        reg += [unit(d, tile[d] << b) for b in range(_log2(max(1, shape[d] // tile[d])))]
    return Bases(tuple(shape), tuple(reg), tuple(lane), tuple(warp))


def bases_of(enc: str, shape: tuple, aliases: dict) -> Bases:
    """The bit offsets of ``enc`` over ``shape`` (#blocked and #slice of #blocked)."""
    enc = aliases.get(enc, enc)
    if enc.startswith("#ttg.blocked<"):
        return _blocked(enc, shape)
    if enc.startswith("#ttg.slice<"):
        m = re.match(r"#ttg\.slice<\{dim = (\d+), parent = (.*)\}>$", enc)
        if not m:
            raise NotImplementedError(f"slice layout {enc}")
        dim, parent = int(m.group(1)), m.group(2)
        full = shape[:dim] + (1,) + shape[dim:]
        pb = bases_of(parent, full, aliases)
        drop = lambda v: v[:dim] + v[dim + 1:]  # noqa: E731
        return Bases(tuple(shape), tuple(drop(v) for v in pb.reg if any(drop(v))),
                     tuple(drop(v) for v in pb.lane), tuple(drop(v) for v in pb.warp))
    if enc.startswith("#ttg.nvidia_mma<"):
        return _mma(enc, shape)
    if enc.startswith("#ttg.linear<"):
        return _linear(enc, shape)
    kind = enc.split("<")[0]
    raise NotImplementedError(f"reductions over {kind} layouts are not modelled yet "
                              "(#blocked, #slice, #linear and #nvidia_mma v2 / v3 are)")


def _linear(enc: str, shape: tuple) -> Bases:
    """``#ttg.linear<{register = [[..]], lane = [[..]], warp = [[..]], block = [[..]]}>``:
    the bases themselves, one coordinate vector per bit (Triton's LinearLayout)."""
    def vectors(name):
        m = re.search(name + r" = \[((?:\[[\d, ]*\],? ?)*)\]", enc)
        if not m:
            raise NotImplementedError(f"linear layout without {name}: {enc}")
        out = [tuple(int(x) for x in v.split(",") if x.strip())
               for v in re.findall(r"\[([\d, ]*)\]", m.group(1))]
        if any(len(v) != len(shape) for v in out):
            raise NotImplementedError(f"linear layout of rank other than {len(shape)}: {enc}")
        return tuple(out)
    if any(any(v) for v in vectors("block")):
        raise NotImplementedError("multi-CTA (num_ctas > 1) layouts are not modelled")
    return Bases(tuple(shape), vectors("register"), vectors("lane"), vectors("warp"))
