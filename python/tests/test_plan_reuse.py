"""Plan.run's fast path (a call whose tensors have the signatures the checks accepted last time
skips the Python checks): a reused plan reads each call's own tensors, and every change of
shape, stride, dtype, device, kind or writeability still goes through the checks, which name
the argument."""

import numpy as np
import pytest

import kvflash

torch = pytest.importorskip("torch")
import reference  # noqa: E402  (needs torch)

H, HKV, D, CAP = 8, 2, 64, 40


def counting(plan):
    """Counts the calls that took the checked path."""
    calls = []
    checked = plan._run_checked

    def wrapper(*args):
        calls.append(1)
        return checked(*args)
    plan._run_checked = wrapper
    return calls


def tensors(seed, batch=2, q_tokens=1, lib=np):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, q_tokens, H, D)).astype(np.float32)
    kv = rng.standard_normal((2, batch, CAP, HKV, D)).astype(np.float32)
    k, v = kvflash.quantize(kv[0], "q8_0"), kvflash.quantize(kv[1], "q4_0")
    lens = np.array([CAP - 3 * s for s in range(batch)], np.int64)
    sinks = rng.standard_normal(H).astype(np.float32)
    alibi = (rng.random(H) * 0.1).astype(np.float32)
    mask = np.where(rng.random((batch, q_tokens, CAP)) < 0.2, -np.inf, 0).astype(np.float32)
    t = dict(q=q, k=k, v=v, lens=lens, sinks=sinks, alibi=alibi, mask=mask)
    if lib is torch:
        t = {name: torch.from_numpy(x) for name, x in t.items()}
    return t


def fresh(t, **kw):
    """The same call without a plan to reuse."""
    return kvflash.attention(t["q"], t["k"], t["v"], t["lens"], k_type="q8_0", v_type="q4_0",
                             return_lse=True, **kw)


@pytest.mark.parametrize("lib", [np, torch], ids=["numpy", "torch"])
def test_a_reused_plan_reads_each_calls_tensors(lib):
    """Every tensor changes address between calls (sinks, ALiBi, a mask, lse included); the
    checked path runs once."""
    first = tensors(0, q_tokens=3, lib=lib)
    plan = kvflash.Plan.for_tensors(first["q"], first["k"], first["v"], k_type="q8_0",
                                    v_type="q4_0", sinks=first["sinks"],
                                    alibi_slopes=first["alibi"], mask=first["mask"])
    checked = counting(plan)
    for seed in range(4):
        t = tensors(seed, q_tokens=3, lib=lib)
        feats = dict(sinks=t["sinks"], alibi_slopes=t["alibi"], mask=t["mask"])
        out, lse = plan.run(t["q"], t["k"], t["v"], t["lens"], return_lse=True, **feats)
        want_out, want_lse = fresh(t, **feats)
        assert type(out) is type(t["q"])
        assert np.array_equal(np.asarray(out), np.asarray(want_out))
        assert np.array_equal(np.asarray(lse), np.asarray(want_lse))
    assert len(checked) == 1


def test_out_given_is_written_and_returned_on_the_fast_path():
    t = tensors(1, lib=torch)
    plan = kvflash.Plan.for_tensors(t["q"], t["k"], t["v"], k_type="q8_0", v_type="q4_0")
    checked = counting(plan)
    outs = [torch.full((2, 1, H, D), float("nan")) for _ in range(3)]
    for out in outs:
        assert plan.run(t["q"], t["k"], t["v"], t["lens"], out=out) is out
        assert torch.equal(out, fresh(t)[0])
    assert len(checked) == 1


def test_numpy_and_torch_alternate():
    t = tensors(2)
    tt = {name: torch.from_numpy(x) for name, x in t.items()}
    plan = kvflash.Plan.for_tensors(t["q"], t["k"], t["v"], k_type="q8_0", v_type="q4_0")
    want = fresh(t)[0]
    for args in (t, tt, t, tt):
        out = plan.run(args["q"], args["k"], args["v"], args["lens"])
        assert np.array_equal(np.asarray(out), want)


Q = np.zeros((1, 1, H, D), np.float32)
K = np.zeros((1, CAP, HKV, kvflash.row_size("q8_0", D)), np.uint8)
OUT = np.zeros((1, 1, H, D), np.float32)


def readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


def meta(a):
    return torch.empty(a.shape, dtype=torch.from_numpy(a).dtype, device="meta")


# (argument, its replacement after a successful call, exception, words): each differs from the
# accepted tensor in one property of its signature.
CHANGES = [
    ("q", np.zeros((1, 1, H, 2 * D), np.float32)[..., ::2], ValueError, "q: strides"),
    ("q", np.zeros((1, 1, H // 2, D), np.float32), ValueError, "q: gives n_q_heads=4"),
    ("q", Q.astype(np.float64), TypeError, "q: dtype float64"),
    ("q", Q.byteswap().view(Q.dtype.newbyteorder()), TypeError, "machine's byte order"),
    ("q", "q", TypeError, "q: expected a NumPy array or a torch tensor, got str"),
    ("k", K[:, :CAP // 2], ValueError, "v_cache: shape (1, 40, 2, 68), expected (1, 20"),
    ("k", np.zeros(K.shape[:3] + (2 * K.shape[3],), np.uint8)[..., ::2], ValueError,
     "k_cache: the last dimension has stride 2"),
    ("k", np.zeros((1, CAP, HKV, K.shape[3]), np.int8), TypeError, "k_cache: dtype int8"),
    ("lens", np.array([CAP + 1], np.int64), ValueError, "kv_lens"),  # the library's check
    ("lens", np.array([1], np.int32), TypeError, "kv_lens: dtype int32"),
    ("lens", np.array([1, 1], np.int64), ValueError, "kv_lens: shape (2,)"),
    ("out", readonly(OUT), ValueError, "out: a read-only"),
    ("out", np.zeros((1, 1, H, D), np.float64), TypeError, "out: dtype float64"),
    ("out", np.zeros((1, 1, H, D + 1), np.float32), ValueError, "out: shape"),
]


@pytest.mark.parametrize("lib", [np, torch], ids=["numpy", "torch"])
@pytest.mark.parametrize("name, bad, error, words", CHANGES,
                         ids=[f"{c[0]}-{c[3][:24]}" for c in CHANGES])
def test_a_changed_signature_is_checked_again(lib, name, bad, error, words):
    def arg(x):
        return torch.from_numpy(x) if lib is torch and isinstance(x, np.ndarray) else x
    if lib is torch and isinstance(bad, np.ndarray) and (not bad.dtype.isnative or
                                                         not bad.flags.writeable):
        pytest.skip("NumPy only")
    good = dict(q=Q, k=K, v=K, lens=np.array([CAP], np.int64), out=OUT.copy())
    plan = kvflash.Plan.for_tensors(arg(Q), arg(K), arg(K), k_type="q8_0", v_type="q8_0")

    def run(**changed):
        t = {n: arg(x) for n, x in (good | changed).items()}
        return plan.run(t["q"], t["k"], t["v"], t["lens"], out=t["out"])
    run()
    run()  # remembered
    with pytest.raises(error) as e:
        run(**{name: bad})
    assert words in str(e.value)
    run()  # and back


def test_a_tensor_on_another_device_is_checked_again():
    t = dict(q=torch.from_numpy(Q), k=torch.from_numpy(K), out=torch.from_numpy(OUT.copy()))
    plan = kvflash.Plan.for_tensors(t["q"], t["k"], t["k"], k_type="q8_0", v_type="q8_0")
    plan.run(t["q"], t["k"], t["k"], out=t["out"])
    plan.run(t["q"], t["k"], t["k"], out=t["out"])
    for name in t:
        args = dict(t, **{name: meta(t[name].numpy())})
        with pytest.raises(ValueError, match="on meta, expected cpu"):
            plan.run(args["q"], args["k"], args["k"], out=args["out"])


def test_a_tensor_resized_in_place_is_checked_again():
    """The same object, a new shape: signatures are read off every call, not by identity."""
    q, k, out = (torch.from_numpy(x.copy()) for x in (Q, K, OUT))
    plan = kvflash.Plan.for_tensors(q, k, k, k_type="q8_0", v_type="q8_0")
    plan.run(q, k, k, out=out)
    plan.run(q, k, k, out=out)
    out.resize_(1, 1, H, 8)
    with pytest.raises(ValueError, match="out: shape"):
        plan.run(q, k, k, out=out)
    k.set_(k.storage(), 0, (1, CAP, HKV, 40))
    with pytest.raises(ValueError, match="k_cache: rows of 40"):
        plan.run(q, k, k)


def test_optional_tensors_given_or_dropped_are_checked_again():
    plan = kvflash.Plan.for_tensors(Q, K, K, k_type="q8_0", v_type="q8_0")
    plan.run(Q, K, K)
    plan.run(Q, K, K)
    with pytest.raises(ValueError, match="sinks: given to a plan without them"):
        plan.run(Q, K, K, sinks=np.zeros(H, np.float32))
    out, lse = plan.run(Q, K, K, return_lse=True)
    assert lse.shape == (1, 1, H)
    assert np.all(np.isneginf(plan.run(Q, K, K, kv_lens=np.array([0], np.int64),
                                       return_lse=True)[1]))


def test_reference_at_growing_lengths_on_the_fast_path():
    t = tensors(5, batch=1)
    plan = kvflash.Plan.for_tensors(t["q"], t["k"], t["v"], k_type="q8_0", v_type="q4_0")
    checked = counting(plan)
    k = kvflash.dequantize(t["k"], "q8_0", D)
    v = kvflash.dequantize(t["v"], "q4_0", D)
    for n in (1, 9, CAP):
        lens = np.array([n], np.int64)
        out = plan.run(t["q"], t["k"], t["v"], lens)
        want, _ = reference.attention(t["q"], k, v, lens)
        assert reference.nmse(out, want) < 5e-12
    assert len(checked) == 1


def test_attention_keeps_a_plan_per_problem_and_thread(monkeypatch):
    """kvflash.attention plans once per problem (shapes, dtypes, features) in each thread, and its
    cached plan checks every call's tensors as a Plan's does."""
    import sys
    import threading
    module = sys.modules["kvflash.attention"]  # (kvflash.attention is the function)
    monkeypatch.setattr(module, "_local", threading.local())
    planned = []
    for_tensors = kvflash.Plan.for_tensors.__func__

    def counting_for_tensors(cls, *args, **kw):
        planned.append(1)
        return for_tensors(cls, *args, **kw)
    monkeypatch.setattr(kvflash.Plan, "for_tensors", classmethod(counting_for_tensors))
    for seed in range(3):
        t = tensors(seed, lib=torch)
        out, lse = fresh(t)
        want, _ = fresh(tensors(seed))  # NumPy: another key
        assert np.array_equal(out.numpy(), want)
    assert len(planned) == 2
    fresh(t, sinks=t["sinks"])  # another problem
    assert len(planned) == 3
    with pytest.raises(ValueError, match="kv_lens: shape"):
        fresh(dict(t, lens=t["lens"][:1]))
    strided = torch.zeros((2, 1, H, 2 * D))[..., ::2]
    with pytest.raises(ValueError, match="q: strides"):
        fresh(dict(t, q=strided))
    assert len(planned) == 3
    other = []
    thread = threading.Thread(target=lambda: other.append(fresh(t)[0]))
    thread.start()
    thread.join()
    assert len(planned) == 4 and torch.equal(other[0], fresh(t)[0])
