"""Ragged query batches (problem.ragged_q): q, out and lse packed (total, heads, d), sequence s's
queries at rows q_offsets[s] .. q_offsets[s + 1] - 1, each the last q_len(s) positions of its
sequence. Against each sequence alone in float64, and the C API bit for bit."""

import numpy as np
import pytest

import capi
import kvflash

torch = pytest.importorskip("torch")
import reference  # noqa: E402  (needs torch)

H, HKV, D, CAP = 8, 2, 64, 48
Q_LENS = [3, 0, 1, 6]  # a prefill chunk, an idle sequence, a decode token, a longer chunk


def case(k_type="q8_0", v_type="turbo3", seed=0, q_lens=Q_LENS):
    rng = np.random.default_rng(seed)
    batch = len(q_lens)
    offsets = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    q = rng.standard_normal((int(offsets[-1]), H, D)).astype(np.float32)
    kv = rng.standard_normal((2, batch, CAP, HKV, D)).astype(np.float32)
    k, v = kvflash.quantize(kv[0], k_type), kvflash.quantize(kv[1], v_type)
    lens = np.array([CAP - 5 * s for s in range(batch)], np.int64)
    return q, k, v, lens, offsets


@pytest.mark.parametrize("lib", [np, torch], ids=["numpy", "torch"])
@pytest.mark.parametrize("causal", [True, False])
def test_ragged_batch_is_each_sequence_alone(lib, causal):
    q, k, v, lens, offsets = case()
    args = [q, k, v, lens, offsets]
    if lib is torch:
        args = [torch.from_numpy(x) for x in args]
    out, lse = kvflash.attention(*args[:4], k_type="q8_0", v_type="turbo3", causal=causal,
                                 q_offsets=args[4], return_lse=True)
    out, lse = np.asarray(out), np.asarray(lse)
    assert out.shape == (offsets[-1], H, D) and lse.shape == (offsets[-1], H)
    kf, vf = kvflash.dequantize(k, "q8_0", D), kvflash.dequantize(v, "turbo3", D)
    for s, n in enumerate(Q_LENS):
        rows = slice(offsets[s], offsets[s + 1])
        if n == 0:
            continue
        want_out, want_lse = reference.attention(q[None, rows], kf[s:s + 1], vf[s:s + 1],
                                                 lens[s:s + 1], causal=causal)
        assert reference.nmse(out[rows][None], want_out) < 1e-6
        assert np.allclose(lse[rows][None], want_lse, atol=1e-4)
    want_out, want_lse = capi.attention(q, k, v, "q8_0", "turbo3", lens, causal=causal,
                                        q_offsets=offsets, max_q_tokens=max(Q_LENS))
    assert np.array_equal(out, want_out) and np.array_equal(lse, want_lse)


def test_a_ragged_plan_serves_batches_of_any_composition():
    """One plan (batch 4, at most 6 queries a sequence), different offsets every call, the fast
    path after the first: the rows each call's offsets say, no more."""
    plan = kvflash.Plan(q_heads=H, kv_heads=HKV, head_dim=D, kv_capacity=CAP, k_type="q8_0",
                        v_type="turbo3", batch=4, q_tokens=6, ragged=True)
    assert plan.problem.ragged_q
    for seed, q_lens in enumerate(([1, 1, 1, 1], [6, 0, 2, 1], [0, 0, 0, 6], [0, 0, 0, 0])):
        q, k, v, lens, offsets = case(seed=seed, q_lens=q_lens)
        out = plan.run(q, k, v, lens, q_offsets=offsets)
        want, _ = capi.attention(q, k, v, "q8_0", "turbo3", lens, q_offsets=offsets,
                                 max_q_tokens=6)
        assert np.array_equal(out, want)
        # The same shapes: the fast path reads these offsets too.
        out = plan.run(q, k, v, lens, q_offsets=offsets)
        assert np.array_equal(out, want)


def test_offsets_that_break_the_rules_or_pass_the_rows_are_refused():
    q, k, v, lens, offsets = case()
    plan = kvflash.Plan.for_tensors(q, k, v, k_type="q8_0", v_type="turbo3", q_offsets=offsets)
    assert plan.problem.n_q_tokens == max(Q_LENS)
    plan.run(q, k, v, lens, q_offsets=offsets)
    plan.run(q, k, v, lens, q_offsets=offsets)  # remembered
    for bad, words in (([1, 3, 3, 4, 10], "q_offsets[0]"),
                       ([0, 3, 2, 3, 9], "q_offsets[2] - q_offsets[1]"),
                       ([0, 6, 6, 7, 13], "more rows than q"),   # steps fine, 13 > 10 rows
                       ([0, 7, 7, 8, 10], "q_offsets[1] - q_offsets[0]")):  # 7 > q_tokens
        with pytest.raises(ValueError) as e:
            plan.run(q, k, v, lens, q_offsets=np.array(bad, np.int32))
        assert words in str(e.value), str(e.value)
    with pytest.raises(ValueError, match="q_offsets: the plan is ragged, pass them"):
        plan.run(q, k, v, lens)
    with pytest.raises(TypeError, match="q_offsets: dtype int64"):
        plan.run(q, k, v, lens, q_offsets=offsets.astype(np.int64))
    with pytest.raises(ValueError, match="q_offsets: gives n_seqs=3"):
        plan.run(q, k[:3], v[:3], lens[:3], q_offsets=offsets[:4])
    with pytest.raises(ValueError, match="out: shape"):
        plan.run(q, k, v, lens, q_offsets=offsets, out=np.zeros((9, H, D), np.float32))
    with pytest.raises(ValueError, match="q: 4 dimensions"):
        plan.run(q[None], k, v, lens, q_offsets=offsets)


def test_offsets_given_to_a_plan_that_is_not_ragged():
    q, k, v, lens, offsets = case()
    plan = kvflash.Plan(q_heads=H, kv_heads=HKV, head_dim=D, kv_capacity=CAP, k_type="q8_0",
                        v_type="turbo3", batch=4, q_tokens=6)
    with pytest.raises(ValueError, match="q_offsets: given to a plan that is not ragged"):
        plan.run(q, k, v, lens, q_offsets=offsets)


def test_device_offsets_need_max_q_tokens():
    q, k, v, lens, offsets = case()
    with pytest.raises(ValueError, match="max_q_tokens"):
        kvflash.attention(torch.from_numpy(q), k, v, lens, k_type="q8_0", v_type="turbo3",
                          q_offsets=torch.empty(5, dtype=torch.int32, device="meta"))
