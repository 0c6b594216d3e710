"""What FPRev probes: an implementation of a sum of n summands.

A :class:`Target` runs probe rows (:mod:`..rows`) and returns the float64 outputs.  Two
shapes cover everything:

* :class:`VectorTarget` - a callable summing a 1-D tensor; one output per call.  Keeps one
  input buffer and only rewrites what changes between probes; on CUDA the answers stay on
  the device until the whole batch is done (one synchronisation per batch).
* :class:`RowsTarget` - the summands of several independent outputs at once (the rows of a
  matmul, a sum over one dim of a 2-D tensor, collective element positions): one call
  answers ``rows_per_call`` probes.  Whether rows really are independent and identical is
  checked first (seed 003, Step 1).

Both also offer :meth:`Target.baseline_session`, the one-probe-at-a-time protocol of the
published FPRev code, used by the paper's algorithms (``algorithm="fprev"`` etc.).
"""
from __future__ import annotations

import numpy as np
import torch

from ...limits import check
from ..errors import FPRevError
from ..probes import ProbeValues, check_dtype
from ..rows import dense_rows

_NP_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}


class Target:
    """Base class.  Subclasses set ``n``, ``values``, ``dtype``, ``device``, ``label``."""

    n: int
    values: ProbeValues
    dtype: torch.dtype
    device: torch.device
    label: str = "target"
    rows_per_call: int = 1
    # True when the target is known to add with plain IEEE additions (library sums): then
    # the default algorithm may verify guessed structure instead of revealing it
    ieee: bool = False

    def __init__(self):
        self.calls = 0

    def run(self, rows: list) -> np.ndarray:
        raise NotImplementedError

    def calibrate(self) -> None:
        """Check the probe values on this target, then lower ``values.capacity`` to what its
        accumulator counts exactly.

        * one unit must come out as itself (a flushed subnormal unit would read 0);
        * +big (and -big) with units on every other summand must come out as exactly
          +-big, with the mask on the first, the middle and the last summand: every unit
          meets big somewhere and must be swamped there, otherwise the input format's range
          is too small for this accumulator and the answers would describe the probe values
          rather than the order.  One position is not enough: units summed among themselves
          before they meet big (a whole chunk of a chain before a mask on the last summand)
          can reach big's kept precision although a single unit cannot;
        * sums of 2**k units must be exact (no order can make them inexact below the
          accumulator's precision, and all orders stall above it).
        """
        from ..errors import ProbeRangeError
        from ..rows import Support, single_row
        v = self.values
        sizes, k = [], 1
        while k <= self.n:
            sizes.append(k)
            k *= 2
        rows = [single_row(Support(np.arange(s))) for s in sizes]
        everyone = Support(np.arange(self.n))
        masks = []
        if self.n > 1:
            masks = [(pos, sign * v.big) for pos in sorted({0, self.n // 2, self.n - 1})
                     for sign in (1, -1)]
            rows += [single_row(everyone, (mk,)) for mk in masks]
        out = np.concatenate([self.run(rows[i:i + self.rows_per_call])
                              for i in range(0, len(rows), self.rows_per_call)])
        if out[0] != v.unit:
            raise ProbeRangeError(
                f"{self.describe()}: a single unit {v.unit} came out as {out[0]!r} (flushed "
                "subnormal?); pass a larger unit= (a normal number of the input format)")
        for (pos, m), y in zip(masks, out[len(sizes):]):
            if y != m:
                raise ProbeRangeError(
                    f"{self.describe()}: {m} on summand {pos} plus {self.n - 1} units of "
                    f"{v.unit} came out as {float(y)!r}, not {m}: the units are not swamped (units "
                    "summed before they meet big reach its kept precision), so the input "
                    "format's dynamic range is too small for this accumulator with "
                    f"{self.n} summands (pass big=/unit=, use a wider format or fewer "
                    "summands)")
        cap = v.capacity
        for s, y in zip(sizes, out):
            if y != s * v.unit:
                cap = min(cap, max(2, s // 2))
                break
        if cap != v.capacity:
            self.values = v.with_capacity(1 << (cap.bit_length() - 1))

    def check_independence(self) -> None:
        """Seed 003 Step 1 for targets answering several probes per call (no-op here)."""

    def baseline_session(self) -> "BaselineSession":
        raise NotImplementedError

    def describe(self) -> str:
        return self.label


class BaselineSession:
    """Published-FPRev protocol: one persistent input, set/reset single summands by tensor
    indexing, one call and one ``.item()`` per probe."""

    def __init__(self, target: Target, data: torch.Tensor, index, run):
        self.target, self.data, self._index, self._run = target, data, index, run

    def set(self, k: int, value: float) -> None:
        self.data[self._index(k)] = value

    def run(self) -> float:
        self.target.calls += 1
        return self._run(self.data)


class VectorTarget(Target):
    """``fn(x)`` sums the 1-D tensor ``x`` of length ``n`` (torch.sum, a dot with a fixed
    vector, a Python loop, ...)."""

    def __init__(self, fn, n: int, dtype=torch.float32, device="cpu", *, values=None,
                 label: str | None = None, pack: bool = True, ieee: bool = False):
        super().__init__()
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        check("reveal_n", n, "the number of summands n")
        self.fn, self.n, self.ieee = fn, n, ieee
        self.dtype = check_dtype(dtype)
        self.device = torch.device(device)
        self.values = values or ProbeValues.for_dtype(self.dtype, pack=pack)
        self.label = label or getattr(fn, "__qualname__", repr(fn))
        self._buf = torch.zeros(n, dtype=self.dtype, device=self.device)
        npd = _NP_DTYPES.get(self.dtype)
        self._np = self._buf.numpy() if self.device.type == "cpu" and npd else None
        self._state: dict[int, tuple] = {}  # id(support) -> (support, shift) now in buffer
        self._sig = None

    # -- buffer writes: numpy views on CPU (cheap scalar stores), torch ops elsewhere --
    def _add(self, leaves: np.ndarray, w: float) -> None:
        if self._np is not None:
            self._np[leaves] += w
        else:
            idx = torch.from_numpy(leaves).to(self.device)
            self._buf.index_add_(0, idx, torch.full((len(leaves),), w, dtype=self.dtype,
                                                    device=self.device))

    def _get(self, leaves):
        return self._np[leaves].copy() if self._np is not None else self._buf[
            torch.as_tensor(leaves, device=self.device)].clone()

    def _put(self, leaves, vals) -> None:
        if self._np is not None:
            self._np[leaves] = vals
        else:
            self._buf[torch.as_tensor(leaves, device=self.device)] = torch.as_tensor(
                vals, dtype=self.dtype, device=self.device)

    def run(self, rows: list) -> np.ndarray:
        fn, buf, arr = self.fn, self._buf, self._np
        outs = []
        for sig, fields, masks, bulk in rows:
            if sig is not self._sig:
                self._set_fields(fields)
                self._sig = sig
            if bulk:
                saved_bulk = [(lv, self._get(lv)) for lv, _ in bulk]
                for lv, vals in bulk:
                    self._put(lv, vals)
            if not masks:
                outs.append(fn(buf))
            elif arr is not None:
                saved = [(leaf, arr[leaf]) for leaf, _ in masks]
                for leaf, val in masks:
                    arr[leaf] = val
                outs.append(fn(buf))
                for leaf, val in saved:
                    arr[leaf] = val
            else:
                leaves = [leaf for leaf, _ in masks]
                saved = buf[leaves].clone()
                self._put(leaves, [val for _, val in masks])
                outs.append(fn(buf))
                self._put(leaves, saved)
            if bulk:
                for lv, vals in reversed(saved_bulk):
                    self._put(lv, vals)
        self.calls += len(rows)
        if not outs:
            return np.zeros(0)
        if all(isinstance(o, torch.Tensor) and o.dim() == 0 for o in outs):
            # one device->host transfer for the whole batch
            return torch.stack(outs).to(torch.float64).cpu().numpy()
        return np.array([float(o) for o in outs], dtype=np.float64)

    def _set_fields(self, fields) -> None:
        """Rewrite the units of the supports that differ from the ones in the buffer."""
        unit = self.values.unit
        want = {id(sup): (sup, sh) for sup, sh in fields}
        for k, (sup, sh) in self._state.items():
            if want.get(k, (None, None))[1] != sh:
                self._add(sup.leaves, -unit * 2.0 ** sh)
        for k, (sup, sh) in want.items():
            if self._state.get(k, (None, None))[1] != sh:
                self._add(sup.leaves, unit * 2.0 ** sh)
        self._state = want

    def baseline_session(self) -> BaselineSession:
        data = torch.full((self.n,), self.values.unit, dtype=self.dtype, device=self.device)
        return BaselineSession(self, data, lambda k: k, lambda d: float(self.fn(d)))


class RowsTarget(Target):
    """Several independent sums per call: subclasses implement :meth:`eval_rows` mapping a
    (rows_per_call, n) input of ``dtype`` to the rows_per_call outputs."""

    def __init__(self, n: int, rows_per_call: int, dtype, device, values: ProbeValues,
                 label: str, rows: int | None = None):
        super().__init__()
        # physical rows of the input (>= rows_per_call: batch=False probes row 0 only)
        self.rows = rows or rows_per_call
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"the number of summands must be a positive int, got {n!r}")
        if not isinstance(rows_per_call, int) or rows_per_call < 1:
            raise ValueError(f"rows per call must be a positive int, got {rows_per_call!r}")
        check("reveal_n", n, "the number of summands")
        check("elements", n * self.rows, f"{self.rows} rows x {n} summands")
        self.n, self.rows_per_call = n, rows_per_call
        self.dtype, self.device = dtype, torch.device(device)
        self.values, self.label = values, label
        self._independent = None

    def eval_rows(self, X: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def run(self, rows: list) -> np.ndarray:
        outs = []
        for s in range(0, len(rows), self.rows_per_call):
            chunk = rows[s:s + self.rows_per_call]
            X = np.zeros((self.rows, self.n))
            X[:len(chunk)] = dense_rows(chunk, self.n, self.values)
            Xt = torch.from_numpy(X).to(device=self.device, dtype=self.dtype)
            y = self.eval_rows(Xt)
            self.calls += 1
            outs.append(y[:len(chunk)].to(torch.float64))
        if not outs:
            return np.zeros(0)
        return torch.cat(outs).cpu().numpy()

    def check_independence(self) -> None:
        """Seed 003 Step 1: identical random rows must give bit-identical outputs, else
        the rows are not computed alike and cannot carry independent probes."""
        if self.rows_per_call == 1 or self._independent:
            return
        g = torch.Generator().manual_seed(1234)
        for _ in range(2):
            row = torch.randn(self.n, generator=g, dtype=torch.float64)
            X = row.expand(self.rows_per_call, self.n).to(device=self.device, dtype=self.dtype)
            y = self.eval_rows(X.contiguous()).to(torch.float64).cpu()
            self.calls += 1
            if not torch.equal(y, y[:1].expand_as(y)) and not torch.isnan(y).all():
                raise FPRevError(
                    f"{self.label}: identical input rows gave different outputs, so the rows "
                    "are not computed alike (seed 003 Step 1 failed); reveal one row at a "
                    "time with batch=False")
        self._independent = True

    def baseline_session(self) -> BaselineSession:
        data = torch.full((self.rows, self.n), self.values.unit, dtype=self.dtype,
                          device=self.device)
        return BaselineSession(self, data, lambda k: (0, k),
                               lambda d: float(self.eval_rows(d)[0]))
