"""The census of what ran natively under ``emulate``: every aten op that reaches the mode,
has no handler (or whose handler left it native), and is not bookkeeping is counted by name
and named in ``em.summary()`` ("ran natively, in the CPU's order: aten.cumsum x3").

Bookkeeping, not counted, because its result has the same bits on any device: views and
in-place view changes (an op whose result aliases its input: ``view``, ``transpose``,
``expand``, ``split``, ``detach``, ``as_strided_``), metadata queries, copies and dtype
casts (round to nearest even on both), creation of constant tensors, and pure data
movement (``cat``, ``index``, ``gather``, ``index_select``, ``embedding``,
``masked_fill``, ``where``, padding): :data:`BOOKKEEPING`.  Everything else that computes
- arithmetic, reductions, random numbers, scans - is counted.
"""
from __future__ import annotations

import torch

__all__ = ["BOOKKEEPING", "is_bookkeeping"]

# op packet names whose results are copies of their inputs' bits or constants
BOOKKEEPING = frozenset({
    # copies, casts, layout
    "clone", "copy", "copy_", "_to_copy", "to", "contiguous", "_unsafe_view", "view_copy",
    "lift_fresh", "lift_fresh_copy", "_copy_from", "_copy_from_and_resize", "resize_",
    "resize_as_", "set_", "_reshape_alias", "_reshape_copy", "alias_copy", "detach_copy",
    "_local_scalar_dense", "item", "_to_dense", "_conj", "_neg_view", "_resolve_conj",
    "_resolve_neg", "pin_memory", "_pin_memory",
    # creation of constants
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
    "new_full", "fill", "fill_", "zero_", "scalar_tensor", "_efficientzerotensor",
    # data movement (bits moved, none computed)
    "cat", "stack", "index", "_unsafe_index", "index_select", "gather", "embedding",
    "masked_fill", "masked_fill_", "where", "constant_pad_nd", "slice_scatter",
    "select_scatter", "diagonal_scatter", "as_strided_scatter", "repeat", "tril", "triu",
    "tril_", "triu_", "flip", "roll", "index_copy", "index_copy_", "masked_scatter",
    "masked_select", "narrow_copy",
    "split_with_sizes_copy", "unbind_copy", "expand_copy", "permute_copy", "t_copy",
    "transpose_copy", "unsqueeze_copy", "squeeze_copy", "select_copy", "slice_copy",
    # the views' backward: zeros with the gradient copied into the viewed place
    "slice_backward", "select_backward", "diagonal_backward",
    # metadata and predicates
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size", "stride", "numel",
    "dim", "is_same_size", "is_nonzero", "_has_same_storage_numel", "is_contiguous",
    "is_strides_like_format", "is_non_overlapping_and_dense", "_nested_tensor_size",
})


def is_bookkeeping(func) -> bool:
    """Whether aten op ``func`` only views, copies, creates constants or moves bits."""
    if func.overloadpacket.__name__ in BOOKKEEPING:
        return True
    if torch.Tag.inplace_view in func.tags or torch.Tag.view_copy in func.tags:
        return True
    # a view: a result that aliases an input without writing it
    return any(r.alias_info is not None and not r.alias_info.is_write
               for r in func._schema.returns)
