"""Step 2 of seed 003 through :mod:`torch_mma_emu.fprev`: the K products and c are the
summands; each probe value is split into two input factors by the probe runner, so the
swamping range is the *product* range (twice the input format's) and c may carry +-big."""
from __future__ import annotations

import torch

from ..fprev import ProbeValues, RowsTarget, reveal_target
from ..fprev.errors import ProbeRangeError
from .vectors import Unrealizable


class _ProductSums(RowsTarget):
    def __init__(self, ctx, k: int, values: ProbeValues, rows: int = 64):
        super().__init__(k + 1, rows, torch.float64, "cpu", values,
                         f"{ctx.target.describe()} [{k} products + c]")
        self.ctx, self.k = ctx, k

    def check_independence(self) -> None:
        """Seed 003 Step 1 with realisable values: identical random rows, identical bits."""
        g = torch.Generator().manual_seed(1234)
        unit = self.values.unit
        sign = torch.randint(0, 2, (self.n,), generator=g).double() * 2 - 1
        row = (sign * torch.exp2(torch.randint(0, 4, (self.n,), generator=g).double()) * unit).tolist()
        outs = self.ctx.runner.run([self.ctx.vec(row[:self.k], row[self.k])] * 4)
        if len({o.code for o in outs}) != 1:
            from ..fprev.errors import FPRevError
            raise FPRevError(f"{self.label}: identical inputs gave different outputs")

    def eval_rows(self, X: torch.Tensor) -> torch.Tensor:
        vecs = []
        for row in X.tolist():
            try:
                vecs.append(self.ctx.vec(row[:self.k], row[self.k]))
            except Unrealizable as e:
                raise ProbeRangeError(f"probe value not realisable: {e}") from e
        outs = self.ctx.runner.run(vecs)
        return torch.tensor([o.value for o in outs], dtype=torch.float64)


def reveal_order(ctx, k: int):
    out = ctx.out
    lo, hi = ctx.prod_range(scaled=False)
    big_e = min(hi, out.emax - 2)
    unit_e = max(lo, out.emin)
    if big_e - unit_e < 4:
        raise ProbeRangeError(f"products span only 2**{unit_e}..2**{big_e}: too narrow to swamp")
    cap = 1 << min(out.man_bits + 1, 20)
    values = ProbeValues(2.0 ** big_e, 2.0 ** unit_e, cap)
    return reveal_target(_ProductSums(ctx, k, values))
