"""Derive torch_mma_emu/data/cublaslt_splitk_<gpu>.npz from mmaemu 0.1.0's recorded cuBLASLt
12.8.3.14 heuristic tables (Apache-2.0; ``mmaemu/platform/data/heur_<gpu>_lt12.8.3.14.npz``
in its wheel or sdist).

    python scripts/data/cublaslt_splitk_table.py PATH/heur_h100pcie_lt12.8.3.14.npz h100pcie

Kept: the rows of torch's 1 MiB and Transformer Engine's 32 MiB workspace
as ``shapes`` (n, 3: M, N, K, sorted) and ``table`` (n, 80) uint8: column
``(((fa * 2 + fb) * 5 + out) * 2 + fast) * 2 + w`` (the source's codes: fa/fb 0 e4m3,
1 e5m2; out 0 fp32, 1 bf16, 2 fp16, 3 e4m3fn, 4 e5m2; w 0 for 1 MiB, 1 for 32 MiB), value
``S | customOption << 5`` (the split count; cuBLASLt's customOption, the split reduction
order on sm89: 1 pairwise, else serial), 0 where the setting was not recorded."""
import sys

import numpy as np


def main(src, name, dst_dir="torch_mma_emu/data"):
    z = np.load(src)
    keep = (z["ws"] == 1) | (z["ws"] == 3)     # torch's 1 MiB, Transformer Engine's 32 MiB
    M, N, K = (z[c][keep].astype(np.int64) for c in "MNK")
    shapes, inv = np.unique(np.stack([M, N, K], 1), axis=0, return_inverse=True)
    code = ((((z["fa"][keep].astype(np.int64) * 2 + z["fb"][keep]) * 5 + z["out"][keep]) * 2
             + z["fast"][keep]) * 4 + z["ws"][keep])
    ws = np.where(z["ws"][keep] == 1, 0, 1)
    setting = (((z["fa"][keep].astype(np.int64) * 2 + z["fb"][keep]) * 5 + z["out"][keep]) * 2
               + z["fast"][keep]) * 2 + ws
    S = z["splitK"][keep].astype(np.int64)
    custom = z["custom"][keep].astype(np.int64)
    assert S.max() < 32 and custom.max() < 8 and S.min() >= 1
    table = np.zeros((len(shapes), 80), np.uint8)      # 0: not recorded
    cell = (S | (custom << 5)).astype(np.uint8)
    row = inv.reshape(-1)
    seen = table[row, setting]
    table[row, setting] = cell
    assert np.all(table[row, setting] == cell)
    assert np.all((seen == 0) | (seen == cell)), "a key recorded with two results"
    np.savez_compressed(f"{dst_dir}/cublaslt_splitk_{name}.npz",
                        shapes=shapes.astype(np.int32), table=table)
    print(name, len(shapes), "shapes", int((table > 0).sum()), "rows",
          int(((table & 31) > 1).sum()), "split")


if __name__ == "__main__":
    main(*sys.argv[1:])
