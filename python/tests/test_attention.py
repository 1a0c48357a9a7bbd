"""Attention from Python on the CPU: against attention in float64 on the dequantized K/V
(reference.py; and torch's SDPA where the installed torch has it), and bit for bit against the
library's C API on the same bytes, for every KV type, GQA, every feature, strided and paged
caches, and a Plan reused across lengths."""

import numpy as np
import pytest

import capi
import kvflash

torch = pytest.importorskip("torch")
import reference  # noqa: E402  (needs torch)

TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "turbo2", "turbo3", "turbo4"]
# NMSE of the output against float64 on the same dequantized K/V: f32 rounding in the kernels,
# about 5e-14 (AVX-512, 2-core EPYC); the turbo decode kernels round Q to int16 for their integer
# dot products, about 1e-7. Bounds 100x and 10x those.
NMSE_BOUND = {t: 5e-12 for t in TYPES} | {"turbo2": 1e-6, "turbo3": 1e-6, "turbo4": 1e-6}


class Case:
    """Random q, K and V values and their caches of one K/V type pair (NumPy arrays; caches as
    the package takes them: float32 for f32, uint8 bytes for every other type)."""

    def __init__(self, k_type="q8_0", v_type=None, batch=2, q_tokens=1, q_heads=8, kv_heads=2,
                 head_dim=128, capacity=100, seed=0):
        rng = np.random.default_rng(seed)
        self.k_type, self.v_type = k_type, v_type or k_type
        self.q = rng.standard_normal((batch, q_tokens, q_heads, head_dim)).astype(np.float32)
        kv_shape = (batch, capacity, kv_heads, head_dim)
        self.k_cache = self._cache(rng.standard_normal(kv_shape).astype(np.float32), self.k_type)
        self.v_cache = self._cache(rng.standard_normal(kv_shape).astype(np.float32), self.v_type)
        self.k = self._values(self.k_cache, self.k_type, head_dim)  # what the kernels see
        self.v = self._values(self.v_cache, self.v_type, head_dim)
        self.kv_lens = np.array([capacity - 7 * s for s in range(batch)], np.int64)

    @staticmethod
    def _cache(x, kv_type):
        return x if kv_type == "f32" else kvflash.quantize(x, kv_type)

    @staticmethod
    def _values(cache, kv_type, n):
        return cache if kv_type == "f32" else kvflash.dequantize(cache, kv_type, n)

    def run(self, **kw):
        return kvflash.attention(self.q, self.k_cache, self.v_cache, self.kv_lens,
                                 k_type=self.k_type, v_type=self.v_type, return_lse=True, **kw)

    def expect(self, **kw):
        return reference.attention(self.q, self.k, self.v, self.kv_lens, **kw)

    def c_api(self, **kw):
        return capi.attention(self.q, self.k_cache, self.v_cache, self.k_type, self.v_type,
                              self.kv_lens, **kw)


def check(case, bound=None, **features):
    """The package's out and lse: within the type's bound of float64, and the C API's bits."""
    out, lse = case.run(**features)
    want_out, want_lse = case.expect(**features)
    bound = bound or max(NMSE_BOUND[case.k_type], NMSE_BOUND[case.v_type])
    assert reference.nmse(out, want_out) < bound
    finite = np.isfinite(want_lse.numpy())
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.allclose(lse[finite], want_lse.numpy()[finite], rtol=1e-4, atol=1e-4)
    c_out, c_lse = case.c_api(**features)
    assert np.array_equal(out, c_out) and np.array_equal(lse, c_lse)


@pytest.mark.parametrize("kv_type", TYPES)
@pytest.mark.parametrize("q_tokens", [1, 16])
def test_every_type_decode_and_prefill(kv_type, q_tokens):
    check(Case(kv_type, q_tokens=q_tokens))


@pytest.mark.parametrize("k_type, v_type", [("q8_0", "q4_0"), ("q8_0", "turbo3"),
                                            ("f16", "turbo4"), ("turbo2", "bf16")])
def test_mixed_types(k_type, v_type):
    check(Case(k_type, v_type, q_tokens=3))


@pytest.mark.parametrize("k_type, v_type, k_scale, v_scale",
                         [("fp8_e4m3", "fp8_e4m3", 0.05, 4.0), ("fp8_e5m2", "q8_0", 2.0, 1.0)])
@pytest.mark.parametrize("q_tokens", [1, 16])
def test_fp8_caches_with_their_scales(k_type, v_type, k_scale, v_scale, q_tokens):
    """fp8 rows hold K / k_scale and V / v_scale (vLLM's per-layer scales): the output is
    attention over the dequantized rows times their scales, and the C API's bits."""
    case = Case(k_type, v_type, q_tokens=q_tokens)
    out, lse = case.run(k_scale=k_scale, v_scale=v_scale)
    want_out, want_lse = reference.attention(case.q, case.k * np.float32(k_scale),
                                             case.v * np.float32(v_scale), case.kv_lens)
    assert reference.nmse(out, want_out) < 1e-11
    assert np.allclose(lse, want_lse.numpy(), rtol=1e-4, atol=1e-4)
    c_out, c_lse = case.c_api(k_scale=k_scale, v_scale=v_scale)
    assert np.array_equal(out, c_out) and np.array_equal(lse, c_lse)
    with pytest.raises(ValueError, match="v_scale"):
        Case("f16", q_tokens=1).run(v_scale=2.0)  # scales apply to fp8 types only


@pytest.mark.parametrize("q_heads, kv_heads", [(4, 4), (8, 1), (12, 4)])
def test_gqa_mha_mqa(q_heads, kv_heads):
    check(Case(q_heads=q_heads, kv_heads=kv_heads, q_tokens=2))


@pytest.mark.parametrize("head_dim", [64, 80, 256])
def test_head_dims(head_dim):
    check(Case("q4_0", head_dim=head_dim, capacity=40))


FEATURES = {
    "not_causal": dict(causal=False),
    "window": dict(window=9),
    "softcap": dict(softcap=2.0),
    "scale": dict(scale=0.3),
}


@pytest.mark.parametrize("name", FEATURES)
@pytest.mark.parametrize("q_tokens", [1, 12])
def test_features(name, q_tokens):
    check(Case("q8_0", q_tokens=q_tokens), **FEATURES[name])


@pytest.mark.parametrize("q_tokens", [1, 12])
def test_sinks_alibi_mask(q_tokens):
    case = Case("turbo3", q_tokens=q_tokens)
    rng = np.random.default_rng(5)
    heads, capacity = case.q.shape[2], case.k_cache.shape[1]
    sinks = rng.standard_normal(heads).astype(np.float32)
    slopes = (0.5 ** np.arange(1, heads + 1)).astype(np.float32)
    mask = rng.standard_normal((case.q.shape[0], q_tokens, capacity)).astype(np.float32)
    mask[:, :, ::5] = -np.inf
    check(case, sinks=sinks)
    check(case, alibi_slopes=slopes)
    check(case, mask=mask)
    check(case, sinks=sinks, alibi_slopes=slopes, mask=mask, softcap=3.0, window=30)


def test_a_query_that_sees_nothing_gives_zeros_and_minus_inf():
    case = Case("q8_0", q_tokens=1)
    mask = np.full((2, 1, case.k_cache.shape[1]), -np.inf, np.float32)
    out, lse = case.run(mask=mask)
    assert not out.any() and np.all(lse == -np.inf)


def test_sdpa_where_torch_has_it():
    F = torch.nn.functional
    if not hasattr(F, "scaled_dot_product_attention"):
        pytest.skip(f"torch {torch.__version__} has no scaled_dot_product_attention")
    case = Case("f16", q_tokens=16, capacity=16)
    case.kv_lens = None
    out, _ = case.run(causal=True)
    group = case.q.shape[2] // case.k.shape[2]
    q, k, v = (torch.as_tensor(x).double().transpose(1, 2) for x in (case.q, case.k, case.v))
    want = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1),
                                          v.repeat_interleave(group, 1), is_causal=True)
    assert reference.nmse(out, want.transpose(1, 2)) < NMSE_BOUND["f16"]


def test_torch_tensors_and_float_caches():
    case = Case("f16", q_tokens=2)
    q = torch.from_numpy(case.q)
    k = torch.from_numpy(case.k).half()  # float16 caches name their own type
    v = torch.from_numpy(case.v).to(torch.bfloat16)
    out = kvflash.attention(q, k, v, torch.from_numpy(case.kv_lens))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    want, _ = reference.attention(case.q, case.k, v.float(), case.kv_lens)
    assert reference.nmse(out, want) < NMSE_BOUND["f16"]


def test_strided_caches_give_the_same_bits():
    """A head-major cache (batch, heads, tokens, row) seen as (batch, tokens, heads, row), and a
    cache inside a wider buffer: strides only, the same rows, the same result."""
    case = Case("q4_0", q_tokens=3)
    head_major = np.ascontiguousarray(case.k_cache.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    wide = np.zeros(case.v_cache.shape[:3] + (case.v_cache.shape[3] + 8,), np.uint8)
    wide[..., :case.v_cache.shape[3]] = case.v_cache
    got = kvflash.attention(case.q, head_major, wide[..., :case.v_cache.shape[3]], case.kv_lens,
                            k_type="q4_0", v_type="q4_0")
    assert np.array_equal(got, case.run()[0])


def paged(cache, page_size, rng):
    """(batch, capacity, heads, row) -> shuffled pages (n_pages, page_size, heads, row) and the
    page table (batch, pages_per_seq) int32 that maps them back."""
    batch, capacity = cache.shape[:2]
    per_seq = -(-capacity // page_size)
    padded = np.zeros((batch, per_seq * page_size) + cache.shape[2:], cache.dtype)
    padded[:, :capacity] = cache
    order = rng.permutation(batch * per_seq)
    pages = np.empty((batch * per_seq, page_size) + cache.shape[2:], cache.dtype)
    pages[order] = padded.reshape((batch * per_seq, page_size) + cache.shape[2:])
    return pages, order.reshape(batch, per_seq).astype(np.int32)


@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_paged_caches(page_size):
    """Paged layouts: the reference's result equals its own on the contiguous cache bit for bit;
    the CPU kernel chosen by default reads pages too (one call per page's run of keys: the
    contiguous result up to the summation order at page boundaries)."""
    case = Case("q8_0", "turbo4", q_tokens=2)
    rng = np.random.default_rng(page_size)
    k_pages, table = paged(case.k_cache, page_size, rng)
    v_pages, _ = paged(case.v_cache, page_size, np.random.default_rng(page_size))
    got = kvflash.attention(case.q, k_pages, v_pages, case.kv_lens, page_table=table,
                            k_type="q8_0", v_type="turbo4", kernel="cpu.reference")
    want = case.run(kernel="cpu.reference")[0]
    assert np.array_equal(got, want)
    got = kvflash.attention(case.q, k_pages, v_pages, case.kv_lens, page_table=table,
                            k_type="q8_0", v_type="turbo4")
    want = case.run()[0]
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_plan_runs_at_growing_lengths_into_the_same_buffers():
    case = Case("turbo3", batch=1, capacity=64)
    plan = kvflash.Plan(q_heads=8, kv_heads=2, head_dim=128, kv_capacity=64, k_type="turbo3",
                        v_type="turbo3")
    assert plan.backend == "cpu" and plan.kernel.startswith("cpu.")
    out = np.empty((1, 1, 8, 128), np.float32)
    workspace = plan._workspace_addr
    for n in (1, 17, 64):
        lens = np.array([n], np.int64)
        assert plan.run(case.q, case.k_cache, case.v_cache, lens, out=out) is out
        want, _ = reference.attention(case.q, case.k, case.v, lens)
        assert reference.nmse(out, want) < NMSE_BOUND["turbo3"]
    assert plan._workspace_addr == workspace


@pytest.mark.parametrize("kv_type", ["q8_0", "turbo3"])
@pytest.mark.parametrize("q_tokens", [1, 12])
def test_every_cpu_kernel_by_name(kv_type, q_tokens):
    """Each CPU kernel that serves the case (its guards: types, query count, this CPU's
    instructions) agrees with the reference kernel; the portable ones serve every case."""
    case = Case(kv_type, q_tokens=q_tokens)
    want = case.run(kernel="cpu.reference")[0]
    served = []
    for k in kvflash.kernels():
        if k["backend"] == "cpu":
            try:
                out = case.run(kernel=k["name"])[0]
            except NotImplementedError:
                continue
            assert reference.nmse(out, want) < NMSE_BOUND[kv_type], k["name"]
            served.append(k["name"])
    family = "decode" if q_tokens == 1 else "prefill"
    assert f"cpu.{family}.portable" in served
