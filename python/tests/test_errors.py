"""Wrong arguments become Python exceptions that name the argument (or, for what the library
checks, the library's own message); nothing crashes."""

import numpy as np
import pytest

import kvflash

Q = np.zeros((1, 1, 8, 128), np.float32)
K = np.zeros((1, 32, 2, 136), np.uint8)  # q8_0 rows of 128 values


def readonly(a):
    a.flags.writeable = False
    return a


def call(q=Q, k=K, v=K, **kw):
    kw.setdefault("k_type", "q8_0")
    kw.setdefault("v_type", "q8_0")
    return kvflash.attention(q, k, v, **kw)


@pytest.mark.parametrize("args, error, words", [
    (dict(q=Q.astype(np.float16)), TypeError, "q: dtype float16, expected float32"),
    (dict(q=np.zeros((1, 8, 128), np.float32)), ValueError, "q: 3 dimensions"),
    (dict(k=K[..., :100]), ValueError, "k_cache: rows of 100, expected 136 bytes"),
    (dict(k=np.zeros((1, 32, 2, 272), np.uint8)[..., ::2]), ValueError,
     "k_cache: the last dimension has stride 2"),
    (dict(v=np.zeros((1, 31, 2, 136), np.uint8)), ValueError, "v_cache: shape (1, 31, 2, 136)"),
    (dict(k_type=None), TypeError, "k_cache: uint8 bytes need k_type="),
    (dict(k=K.astype(np.int32)), TypeError, "k_cache: dtype int32"),
    (dict(kv_lens=np.array([33])), ValueError, "kv_lens"),
    (dict(kv_lens=np.array([1, 2], np.int64)), ValueError, "kv_lens: shape (2,)"),
    (dict(sinks=np.zeros(7, np.float32)), ValueError, "sinks: shape (7,)"),
    (dict(out=np.zeros((1, 1, 8, 64), np.float32)), ValueError, "out: shape"),
    (dict(mask=np.zeros((1, 1, 31), np.float32)), ValueError, "mask: 31 columns"),
    (dict(out=np.broadcast_to(np.float32(0), (1, 1, 8, 128))), ValueError, "out: strides"),
    (dict(out=readonly(np.zeros((1, 1, 8, 128), np.float32))), ValueError, "out: a read-only"),
    (dict(q="q"), TypeError, "q: expected a NumPy array or a torch tensor, got str"),
])
def test_bad_arguments_name_themselves(args, error, words):
    with pytest.raises(error) as e:
        call(**args)
    assert words in str(e.value)


def test_q_must_be_contiguous():
    call(q=np.zeros((1, 2, 8, 128), np.float32)[:, :1])  # a step over extent 1 is never taken
    with pytest.raises(ValueError, match="q: strides"):
        call(q=np.zeros((1, 1, 8, 256), np.float32)[..., ::2])


def test_lengths_past_the_capacity_are_the_librarys_error():
    with pytest.raises(ValueError, match="kv_lens"):
        call(kv_lens=np.array([33], np.int64))


def test_outside_the_supported_space_is_a_value_error_naming_the_field():
    q = np.zeros((1, 1, 8, 100), np.float32)
    with pytest.raises(ValueError, match="head_dim"):
        kvflash.attention(q, np.zeros((1, 4, 2, 100), np.float32),
                          np.zeros((1, 4, 2, 100), np.float32))


def test_a_kernel_that_declines_is_not_implemented_with_the_reasons():
    q = np.zeros((1, 16, 8, 128), np.float32)  # 16 query tokens: more than a decode kernel takes
    with pytest.raises(NotImplementedError) as e:
        call(q=q, kernel="cpu.decode.portable")
    assert "decode_q_tokens" in str(e.value)


def test_page_table_entries_outside_the_pool_are_refused():
    k = np.zeros((2, 16, 2, 136), np.uint8)
    table = np.array([[0, 5]], np.int32)
    with pytest.raises(ValueError, match="page"):
        call(k=k, v=k, page_table=table, kv_lens=np.array([32], np.int64),
             kernel="cpu.reference")


def test_unknown_kernel_names():
    with pytest.raises((ValueError, NotImplementedError), match="cpu.nothing"):
        call(kernel="cpu.nothing")


def test_plan_run_checks_the_tensors_against_the_plan():
    plan = kvflash.Plan(q_heads=8, kv_heads=2, head_dim=128, kv_capacity=32, k_type="q8_0",
                        v_type="q8_0")
    plan.run(Q, K, K)
    with pytest.raises(ValueError, match="q: gives n_q_heads=4, the plan has 8"):
        plan.run(np.zeros((1, 1, 4, 128), np.float32), K, K)
    with pytest.raises(ValueError, match="k_cache: gives kv_capacity=16"):
        plan.run(Q, K[:, :16], K[:, :16])
    with pytest.raises(ValueError, match="sinks: given to a plan without them"):
        plan.run(Q, K, K, sinks=np.zeros(8, np.float32))
    with pytest.raises(TypeError, match="k_cache: dtype float16 holds f16, not k_type='q8_0'"):
        plan.run(Q, np.zeros((1, 32, 2, 128), np.float16), K)


def test_tensors_on_another_device_are_refused():
    torch = pytest.importorskip("torch")
    out = torch.empty((1, 1, 8, 128), device="meta")
    with pytest.raises(ValueError, match="out: on meta"):
        call(q=torch.from_numpy(Q), k=torch.from_numpy(K), v=torch.from_numpy(K), out=out)


def test_a_plans_problem_is_a_copy():
    plan = kvflash.Plan(q_heads=8, kv_heads=2, head_dim=128, kv_capacity=32, k_type="q8_0",
                        v_type="q8_0")
    plan.problem.kv_capacity = 1 << 20
    assert plan.problem.kv_capacity == 32
