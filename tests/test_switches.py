"""The process-wide switches (the mechanism, torch_mma_emu/switches.py; the preview's
patches, torch_mma_emu/preview/patches.py): reference counts across nested blocks, threads
that leave in another order than they came and blocks that raise; every switch puts back exactly what it found when its last holder leaves; a wrapper it installed
and someone kept does what the original does once the switch is off."""
from __future__ import annotations

import re
import sys
import threading
import types

import pytest
import torch

from torch_mma_emu import switches
from torch_mma_emu.preview import module_hooks, patches


# -- the counting itself, on a switch that logs what it does ------------------------------
class _Flag:
    value = "original"


def _logged():
    log = []

    def install(p):
        log.append("on")
        p.set(_Flag, "value", "switched", mine=False)
    return switches.patch_switch("test flag", "_Flag.value", install), log


def test_nested_blocks_switch_once_and_restore_at_the_last_close():
    sw, log = _logged()
    with sw:
        assert _Flag.value == "switched" and sw.depth == 1
        with sw:
            assert sw.depth == 2
        assert _Flag.value == "switched" and sw.is_on      # the outer block still holds it
    assert _Flag.value == "original" and not sw.is_on and log == ["on"]


def test_two_threads_leaving_in_the_other_order():
    sw, log = _logged()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():                          # enters first, leaves first
        with sw:
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b():                          # enters second, leaves last
        a_in.wait(10)
        with sw:
            b_in.set()
            a_out.wait(10)
            seen["after a left"] = (_Flag.value, sw.depth)
    ts = [threading.Thread(target=f) for f in (a, b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert seen["after a left"] == ("switched", 1)
    assert _Flag.value == "original" and sw.depth == 0 and log == ["on"]


def test_a_block_that_raises_restores():
    sw, _ = _logged()
    with pytest.raises(KeyError):
        with sw:
            with sw:
                raise KeyError("body")
    assert _Flag.value == "original" and sw.depth == 0


def test_a_failing_install_undoes_its_part_and_leaves_no_count():
    def install(p):
        p.set(_Flag, "value", "half-done", mine=False)
        raise RuntimeError("install failed")
    sw = switches.patch_switch("broken", "_Flag.value", install)
    with pytest.raises(RuntimeError, match="install failed"):
        sw.enter()
    assert _Flag.value == "original" and sw.depth == 0
    good, _ = _logged()
    with pytest.raises(RuntimeError, match="install failed"):
        switches.enter_all([good, sw])             # the first one is left again
    assert _Flag.value == "original" and good.depth == 0


def test_leaving_more_often_than_entering_is_an_error():
    sw, _ = _logged()
    with pytest.raises(RuntimeError, match="left more often"):
        sw.leave()


def test_a_wrapper_replaced_by_someone_else_is_left_to_them():
    def install(p):
        p.set(_Flag, "value", "ours")              # mine=True: ours to put back only
    sw = switches.patch_switch("wrapper", "_Flag.value", install)
    with sw:
        _Flag.value = "theirs"
    assert _Flag.value == "theirs"
    _Flag.value = "original"


# -- every real switch: what it changes, and back when the last block closes --------------
def _inductor_state():
    import torch._functorch.config as aot
    import torch._inductor.config as ind
    return (ind.max_autotune_gemm_backends, ind.cpp.weight_prepack, ind.fx_graph_cache,
            aot.enable_autograd_cache)


def _decomp_tables():
    from torch._inductor import decomposition as dec
    tables = [dec.decompositions]
    if hasattr(dec, "fast_random_decomps"):
        tables.append(dec.fast_random_decomps())
    return tables


def _state():
    """Everything the switches may change, by identity or value."""
    import torch._inductor.compile_fx as cfx
    import torch.nn.attention.flex_attention as fa
    from torch._inductor.lowering import lowerings
    from torch.nn.modules import module as nn_module
    flex_ops = patches.flex_ops()
    return {
        "mha": torch.backends.mha.get_fastpath_enabled(),
        "inductor": _inductor_state(),
        "decomps": [dict(t) for t in _decomp_tables()],
        "compile_fx": cfx.compile_fx,
        "validate_device": fa._validate_device,
        "lowerings": [lowerings.get(h) for h in flex_ops],
        "profile": threading.getprofile(),
        "onednn": torch._C._get_mkldnn_enabled(),
        "cuda_available": torch.cuda.is_available,
        "module_hooks": (dict(nn_module._global_forward_pre_hooks),
                         dict(nn_module._global_forward_hooks)),
    }


def _diff(before, after):
    return sorted(k for k in before if before[k] != after[k])


def _profile(frame, event, arg):
    return None


@pytest.fixture
def a_profile_function():
    """A profile function set before the blocks (someone else's): must be there after."""
    old = threading.getprofile()
    threading.setprofile(_profile)
    yield _profile
    threading.setprofile(old)


def test_every_switch_changes_its_setting_and_restores_it(a_profile_function):
    pytest.importorskip("torch._inductor.lowering")
    import torch.nn.attention.flex_attention  # noqa: F401 (its function is patched)
    before = _state()
    every = patches.EMULATE + (patches.ONEDNN_OFF, patches.TORCHAO_GPU_CHECKS)
    block = object()
    with switches.hold(every):
        switches.THREADS.enter("test", block, lambda b: None)     # holds THREAD_START
        try:
            during = _state()
            cuda_during = torch.cuda.is_available()
            with switches.hold(every):           # a nested block changes nothing more
                assert _diff(during, _state()) == []
        finally:
            switches.THREADS.leave(block)
    want = {"inductor", "decomps", "compile_fx", "validate_device", "lowerings", "profile",
            "cuda_available"}
    want |= {k for k in ("mha", "onednn") if before[k]}     # (already off: nothing to do)
    assert set(_diff(before, during)) == want
    assert during["inductor"][0] == "ATEN" and cuda_during is True
    assert during["cuda_available"]() == before["cuda_available"]()    # kept, off: original
    assert during["mha"] is False and during["onednn"] is False
    assert _diff(before, _state()) == []
    assert threading.getprofile() is a_profile_function
    assert not any(s.is_on for s in every + (switches.THREAD_START,))


def test_every_switch_restores_when_the_block_raises():
    before = _state()
    with pytest.raises(ZeroDivisionError):
        with switches.hold(patches.EMULATE + (patches.ONEDNN_OFF,
                                               patches.TORCHAO_GPU_CHECKS)):
            1 / 0
    assert _diff(before, _state()) == []


def test_emulate_blocks_in_two_threads_leave_in_the_other_order():
    from torch_mma_emu.preview import emulate
    before = _state()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen, errors = {}, []

    go = threading.Event()      # both threads run before a block opens: neither adopts one

    def first():
        go.wait(10)
        try:
            with emulate("sm90"):
                first_in.set()
                second_in.wait(10)
                seen["first inside"] = _inductor_state()
            seen["first after"] = _inductor_state()
        except Exception as e:           # noqa: BLE001
            errors.append(e)
        first_out.set()

    def second():
        go.wait(10)
        try:
            first_in.wait(10)
            with emulate("sm90"):
                second_in.set()
                first_out.wait(10)
                seen["inside"] = _state()
                started = threading.Thread(
                    target=lambda: seen.setdefault("started inside", _inductor_state()))
                started.start()
                started.join(10)
            seen["second after"] = _inductor_state()
        except Exception as e:           # noqa: BLE001
            errors.append(e)
    ts = [threading.Thread(target=f) for f in (first, second)]
    for t in ts:
        t.start()
    go.set()
    for t in ts:
        t.join(30)
    assert not errors
    assert seen["inside"]["inductor"][0] == "ATEN"      # still on for the second block
    assert seen["first inside"][0] == seen["started inside"][0] == "ATEN"
    assert seen["second after"] == before["inductor"]
    if patches.inductor_config_per_thread():  # torch 2.12+: each thread gets, restores its own
        assert seen["first after"] == before["inductor"]
    else:                                # torch 2.11: process-wide, the second holds it
        assert seen["first after"] == seen["inside"]["inductor"]
    assert _diff(before, _state()) == []


def test_module_hook_switch_restores_the_global_hooks():
    from torch.nn.modules import module as nn_module
    before = (dict(nn_module._global_forward_pre_hooks), dict(nn_module._global_forward_hooks))
    with emulate_recording():
        assert len(nn_module._global_forward_pre_hooks) > len(before[0])
    assert (dict(nn_module._global_forward_pre_hooks),
            dict(nn_module._global_forward_hooks)) == before
    assert module_hooks.listener_count() == 0


def emulate_recording():
    from torch_mma_emu.preview import emulate
    return emulate("sm90", record=True)


# -- wrappers kept after the last block closed behave like the original --------------------
def test_kept_decomposition_steps_aside_only_while_on():
    from torch._inductor import decomposition as dec
    aten = torch.ops.aten
    op = next((o for o in dec.decompositions
               if getattr(getattr(o, "overloadpacket", None), "__name__", "") == "mm"), None)
    if op is None:
        pytest.skip("no mm decomposition in this Inductor")
    original = dec.decompositions[op]
    a, b = torch.randn(1, 3), torch.randn(3, 1)
    with patches.PRODUCT_DECOMPS:
        kept = dec.decompositions[op]
        assert kept is not original and kept(a, b) is NotImplemented
    assert dec.decompositions[op] is original
    got, want = kept(a, b), original(a, b)
    assert (got is NotImplemented) == (want is NotImplemented)
    if want is not NotImplemented:
        assert torch.equal(got, want)


def test_kept_validate_device_refuses_cpu_grad_again():
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    q = torch.randn(1, 1, 4, 8, requires_grad=True)
    original = fa._validate_device
    with pytest.raises(Exception) as want:
        original(q, q, q)
    with patches.FLEX_CPU_GRAD:
        kept = fa._validate_device
        assert kept(q, q, q) is None             # the previewed GPU has the backward
    assert fa._validate_device is original
    with pytest.raises(type(want.value), match=re.escape(str(want.value))):
        kept(q, q, q)


def test_kept_compile_fx_compiles_as_before(monkeypatch):
    cfx = pytest.importorskip("torch._inductor.compile_fx")
    from torch._dynamo.backends import debugging
    calls = []
    monkeypatch.setattr(cfx, "compile_fx", lambda gm, ex, *a, **k: calls.append("inductor"))
    monkeypatch.setattr(debugging, "aot_eager", lambda gm, ex: calls.append("aot_eager"))
    monkeypatch.setattr(patches, "holds_flex", lambda gm: True)
    with patches.FLEX_COMPILE:
        kept = cfx.compile_fx
        kept(None, [])
    kept(None, [])
    assert calls == ["aot_eager", "inductor"]


def test_kept_flex_lowering_notes_only_while_on(monkeypatch):
    pytest.importorskip("torch._inductor.kernel.flex.flex_attention")
    from torch._inductor.lowering import lowerings
    hop = patches.flex_ops()[0]
    monkeypatch.setitem(lowerings, hop, lambda *a, **k: "lowered")

    class Block:
        notes = []

        def record_native(self, func, args, why):
            self.notes.append(func)
    block = Block()
    switches.THREADS.enter("mode", block, lambda b: None)
    try:
        with patches.FLEX_LOWERING:
            kept = lowerings[hop]
            assert kept() == "lowered"
        assert kept() == "lowered"
    finally:
        switches.THREADS.leave(block)
    assert block.notes == [hop]


def test_kept_torchao_checks_answer_as_the_originals(monkeypatch):
    mod = types.ModuleType("torchao.mma_emu_test")
    mod.is_sm_at_least_89 = lambda: False
    monkeypatch.setitem(sys.modules, "torchao.mma_emu_test", mod)
    original_cuda = torch.cuda.is_available
    with patches.torchao_checks((9, 0)):
        kept, kept_cuda = mod.is_sm_at_least_89, torch.cuda.is_available
        assert kept() is True and kept_cuda() is True
        with patches.torchao_checks((8, 0)):      # the innermost block answers
            assert kept() is False
        assert kept() is True
    assert mod.is_sm_at_least_89 is not kept and mod.is_sm_at_least_89() is False
    assert torch.cuda.is_available is original_cuda
    assert kept() is False and kept_cuda() == original_cuda()


def test_torchao_checks_in_two_threads_leaving_in_the_other_order(monkeypatch):
    mod = types.ModuleType("torchao.mma_emu_test2")
    original = mod.is_sm_at_least_90 = lambda: False
    monkeypatch.setitem(sys.modules, "torchao.mma_emu_test2", mod)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with patches.torchao_checks((9, 0)):
            a_in.set()
            b_in.wait(10)
            seen["a, b inside"] = mod.is_sm_at_least_90()      # b (8.0) opened last
        a_out.set()

    def b():
        a_in.wait(10)
        with patches.torchao_checks((8, 0)):
            b_in.set()
            a_out.wait(10)
            seen["b alone"] = mod.is_sm_at_least_90()
    ts = [threading.Thread(target=f) for f in (a, b)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(10)
    assert seen == {"a, b inside": False, "b alone": False}
    assert mod.is_sm_at_least_90 is original and not patches.TORCHAO_GPU_CHECKS.is_on


def test_kept_thread_start_hands_over_the_original_profile(a_profile_function):
    block = object()
    switches.THREADS.enter("test", block, lambda b: None)
    kept = threading.getprofile()
    assert kept is not a_profile_function
    switches.THREADS.leave(block)
    assert threading.getprofile() is a_profile_function
    old = sys.getprofile()
    try:
        kept(sys._getframe(), "call", None)      # a thread that read ours before the close
        now = sys.getprofile()
    finally:
        sys.setprofile(old)
    assert now is a_profile_function


def test_kept_onednn_and_mha_settings_are_values():
    """ONEDNN_OFF and MHA_FASTPATH install no wrapper: only the values come back."""
    for sw, get in ((patches.ONEDNN_OFF, torch._C._get_mkldnn_enabled),
                    (patches.MHA_FASTPATH, torch.backends.mha.get_fastpath_enabled)):
        before = get()
        with sw:
            assert get() is False
            with sw:
                assert get() is False
        assert get() == before
