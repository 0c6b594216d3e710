"""``mma-emu probe`` and ``mma-emu fit``: the CLI face of :mod:`torch_mma_emu.probe`.

    mma-emu probe --arch sm80 --format fp16          feature report of one interface
    mma-emu probe --arch sm90                         every unscaled format of an arch
    mma-emu probe --native [--format bf16]            this machine's GPU instructions
    mma-emu probe --arch gfx942 --format fp16 --infer --verify 100000
    mma-emu fit tests/data/hwdata/H100_fp16_to_fp32.npz [more files or a directory]

The package CLI calls :func:`register`; ``python -m torch_mma_emu.probe.cli ...`` runs it
alone.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..cli_args import Parser, add_command, bounded, integer, one_line, positive_int


def _bar(items, desc):
    """A progress bar on a terminal's stderr (these loops run seconds per item)."""
    from tqdm import tqdm
    return tqdm(items, desc=desc, leave=False, file=sys.stderr, disable=not sys.stderr.isatty())


def register(subparsers) -> None:
    """Add ``probe`` and ``fit`` to an ``argparse`` sub-parser collection."""
    p = add_command(
        subparsers, "probe", func=cmd_probe,
        help="feature tests and model inference for a matrix unit",
        description="Run the feature tests of seeds 000/004/002 on an emulated arch, this "
                    "machine's GPU (--native) or a serialised spec; optionally infer a spec "
                    "and verify it (seed 003 closed loop).",
        examples_=("mma-emu probe --arch sm80 --format fp16",
                   "mma-emu probe --arch sm90 --format fp8_e4m3 --verify 10000",
                   "mma-emu probe --native --format bf16 --infer"))
    tgt = p.add_mutually_exclusive_group(required=True)
    tgt.add_argument("--arch", help="emulated arch or alias (sm80, H100, gfx942, ...)")
    tgt.add_argument("--native", action="store_true", help="this machine's GPU instructions")
    tgt.add_argument("--spec", help="a serialised spec ('spec:op=t_fdpa,...')")
    p.add_argument("--format", help="input format (fp16, bf16, tf32, fp8_e4m3, 'a,b'); "
                                    "default: every unscaled format of the target")
    p.add_argument("--out", default=None, type=_out_format,
                   help="output format: fp32, fp16, fp64 (default: every output of the "
                        "target; probe writes no file: --json > FILE does)")
    p.add_argument("--scale-format", choices=("ue8m0", "ue4m3"), help="block-scaled inputs")
    p.add_argument("--block-size", type=integer, choices=(16, 32))
    p.add_argument("--instruction", help="a non-default instruction (registry or native name)")
    p.add_argument("--infer", action="store_true", help="also infer a spec (closed loop)")
    p.add_argument("--verify", type=bounded("probe_verify"), default=0, metavar="N",
                   help="verify the inferred spec on N random inputs (implies --infer; at "
                        "most MMA_EMU_MAX_PROBE_VERIFY, 10^7)")
    p.add_argument("--no-order", action="store_true", help="skip the FPRev order reveal")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--details", action="store_true",
                   help="print every feature with how it showed (default for one format)")

    f = add_command(
        subparsers, "fit", func=cmd_fit,
        help="specs reproducing recorded (a, b, c, d) samples",
        description="Search the model space for the specs that reproduce every recorded "
                    "sample (npz files with arrays a, b, c, d; formats from index.json or "
                    "--format/--out).",
        examples_=("mma-emu fit tests/data/hwdata/H100_fp16_to_fp32.npz",
                   "mma-emu fit tests/data/hwdata/ --limit 3"))
    f.add_argument("data", nargs="+", help=".npz files or directories of them")
    f.add_argument("--format", help="input format (when no index.json names it)")
    f.add_argument("--out", type=_out_format, help="output format (fp32, fp16)")
    f.add_argument("--limit", type=positive_int, default=10, help="candidates to print per file")
    f.add_argument("--json", action="store_true")
    f.add_argument("--single-pass", action="store_true",
                   help="search one fused operation per chunk only (no multi-pass "
                        "instructions)")


def _out_format(text: str) -> str:
    """argparse type: an output format name (fp32, fp16, fp64), not a file."""
    from ..formats import out_format
    try:
        return out_format(text)
    except TypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an output format; allowed: fp32, fp16, fp64 (--out names the "
            "accumulator, not a file: --json > FILE writes one)") from None


# ------------------------------------------------------------------------------------

def _interfaces(args) -> list[tuple]:
    """(in_format, out) pairs to probe; ``--out`` without ``--format``: those with that
    output."""
    if args.format:
        return [(args.format, args.out)]
    if args.spec:
        return [(None, args.out)]
    pairs = _all_interfaces(args)
    if args.out:
        kept = [(f, o) for f, o in pairs if (o or "fp32") == args.out]
        if not kept:
            have = sorted({o or "fp32" for _, o in pairs})
            raise ValueError(f"--out {args.out}: no interface of the target has that output "
                             f"(outputs: {', '.join(have)}); give --format too, or another "
                             "--out")
        return kept
    return pairs


def _all_interfaces(args) -> list[tuple]:
    if args.native:
        from .. import native
        fmts = [f for f in ("fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2")
                if native.instructions_for(f)]
        out = []
        for f in fmts:
            out.append((f, "fp32"))
            if f in ("fp16", "fp8_e4m3", "fp8_e5m2"):
                out.append((f, "fp16"))
        return out
    from .. import registry
    from ..formats import scales_text
    out = []
    for r in registry.rows_for(args.arch):
        if r.default and r.scale_format == args.scale_format and \
                (args.block_size is None or args.block_size in r.block_sizes):
            out += [(fmt, r.out) for fmt in r.formats if (fmt, r.out) not in out]
    if not out:
        sf = args.scale_format
        where = [a for a in registry.archs_with(sf) if args.block_size is None or any(
            args.block_size in r.block_sizes for r in registry.rows_for(a) if r.scale_format == sf)]
        what = scales_text(sf) + (f" per {args.block_size} elements" if args.block_size else "")
        raise ValueError(f"{args.arch} has no instruction with {what}" +
                         (f"; {what} need {registry.archs_text(where)}" if where else ""))
    return out


def cmd_probe(args) -> int:
    from .features import features as run_features
    from .infer import infer
    from .tables import summary, table3, table4
    from .verify import verify
    from ..spec import Spec
    if args.native:
        target = "native"
    elif args.spec:
        try:
            target = Spec.from_string(args.spec)
        except (ValueError, TypeError) as e:
            print(f"mma-emu probe: {one_line(e)}", file=sys.stderr)
            return 2
    else:
        target = args.arch
    try:
        pairs = _interfaces(args)
    except (ValueError, RuntimeError) as e:
        print(f"mma-emu probe: {one_line(e)}", file=sys.stderr)
        return 2
    do_infer = args.infer or args.verify > 0
    reports, specs, results, checks = [], [], [], []
    for fmt, out in _bar(pairs, "probe"):
        kw = dict(scale_format=args.scale_format, block_size=args.block_size,
                  instruction=args.instruction)
        try:
            if do_infer:
                inf = infer(target, fmt, out, order=not args.no_order, **kw)
                rep = inf.report
                specs.append((rep.target.split(" (")[0], inf.spec))
                results.append((rep, inf))
                if args.verify:
                    checks.append(verify(inf.spec, target, args.verify, in_format=fmt,
                                         out_dtype=out, instruction=args.instruction))
            else:
                rep = run_features(target, fmt, out, order=not args.no_order, **kw)
        except (ValueError, TypeError, RuntimeError) as e:
            print(f"mma-emu probe: {fmt or ''} -> {out or 'fp32'}: {one_line(e)}",
                  file=sys.stderr)
            return 2
        reports.append(rep)
    if args.json:
        doc = {"reports": [r.to_json() for r in reports],
               "specs": [sp.to_string() for _, sp in specs],
               "verify": [{"n": c.n, "mismatches": c.mismatches} for c in checks]}
        print(json.dumps(doc, indent=1))
        return 0 if all(c.ok for c in checks) else 1
    if args.details or len(reports) == 1:
        for r in reports:
            print(r.table())
            print()
    print(table3(reports))
    if specs:
        print()
        print(table4(specs))
        print()
        print(summary([(r, inf.spec) for r, inf in results]))
        for r, inf in results:
            if len(inf.candidates) > 1:
                print(f"\n{r.interface}: {len(inf.candidates)} specs fit every check; "
                      "best first:")
                for c in inf.candidates[:5]:
                    print(f"  {c.describe()}")
    for c in checks:
        print()
        print("verify: " + c.describe())
    return 0 if all(c.ok for c in checks) else 1


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def _files(paths) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.npz"))
            if not found:
                raise ValueError(f"{p} holds no .npz files")
            out += found
        else:
            out.append(p)
    return out


def cmd_fit(args) -> int:
    from .fit import fit
    from .samples import SamplesFileError
    from .tables import table4
    try:
        files = _files(args.data)
    except ValueError as e:
        print(f"mma-emu fit: {e}", file=sys.stderr)
        return 2
    rows, docs = [], []
    for path in _bar(files, "fit"):
        try:
            res = fit(path, args.format, args.out, passes=not args.single_pass)
        except (ValueError, TypeError, OSError) as e:
            # the path once: SamplesFileError and "no such samples file" name it already
            named = isinstance(e, SamplesFileError) or str(path) in str(e)
            where = "" if named else f"{path}: "
            print(f"mma-emu fit: {where}{_one_line(e)}", file=sys.stderr)
            return 2
        if args.json:
            docs.append({"file": path.name, "features": res.features.describe(),
                         "specs": [c.spec.to_string() for c in res.candidates],
                         "undetermined": res.undetermined, "verdict": res.verdict(),
                         "more_samples": None if res.estimate is None else
                         res.estimate.needed,
                         "closest": [{"spec": sp.to_string(), "mismatches": bad}
                                     for sp, bad in res.closest]})
            continue
        print(res.describe(args.limit))
        print()
        if res.best is not None:
            rows.append((path.stem, res.best))
    if args.json:
        print(json.dumps(docs, indent=1))
    elif rows:
        print(table4(rows))
    return 0


def main(argv=None) -> int:
    ap = Parser(prog="python -m torch_mma_emu.probe.cli")
    sub = ap.add_subparsers(dest="command", required=True)
    register(sub)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
