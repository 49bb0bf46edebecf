"""Notebook 11's measurement helpers: the CPU peak-memory accounting sees what an attention
function allocates (and not views of its inputs), growth exponents are read off correctly, and
the SDPA helpers name the kernel that runs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_utils.lessons.nb11_attention_at_scale import recipe as nb11
from course_utils.modeling import attention


def test_peak_memory_counts_the_score_matrix_of_naive_attention():
    q = torch.randn(2, 64, 16)
    peak = nb11.peak_extra_memory(lambda: attention.scaled_dot_product_attention(q, q, q)[0])
    assert peak >= 2 * 64 * 64 * 4  # at least the (2, 64, 64) float32 scores


def test_peak_memory_ignores_views_and_counts_freed_temporaries_once():
    x = torch.randn(256, 256)

    def views_then_small_result():
        y = x[:, :128].t().reshape(-1)  # views / a copy of half of x
        del y
        return x.sum(dim=0)  # (256,) floats

    peak = nb11.peak_extra_memory(views_then_small_result)
    assert 256 * 4 <= peak <= 256 * 128 * 4 + 256 * 4 + 64


def test_tiling_queries_keeps_memory_near_the_output_size():
    cfg = nb11.config()
    flash = nb11.flash_style(attention.tiled_attention, block_q=32, block_k=32)
    q = torch.randn(1, 2, 512, 16)
    torch.testing.assert_close(flash(q, q, q), attention.scaled_dot_product_attention(q, q, q)[0])
    flash_peak = nb11.peak_extra_memory(lambda: flash(q, q, q))
    naive_peak = nb11.peak_extra_memory(lambda: attention.scaled_dot_product_attention(q, q, q)[0])
    assert flash_peak < naive_peak / 10
    assert cfg.lengths == tuple(sorted(cfg.lengths))


def test_fit_exponent_reads_the_slope_of_a_power_law():
    curve = {n: 3.0 * n**2 for n in (64, 128, 256, 512)}
    assert abs(nb11.fit_exponent(curve) - 2.0) < 1e-9


def test_sdpa_helpers_name_backends_and_the_kernel_that_runs():
    names = [name for name, _ in nb11.sdpa_backends()]
    assert {"MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION"} <= set(names)
    q = torch.randn(1, 2, 8, 4)
    used = nb11.sdpa_kernel_used(q, q, q)
    assert used.startswith(("FLASH", "MATH", "EFFICIENT", "CUDNN"))
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        assert nb11.sdpa_kernel_used(q, q, q).startswith("MATH")
    assert F.scaled_dot_product_attention(q, q, q).shape == q.shape


def test_fit_exponent_is_one_function_shared_by_the_recipes_and_the_benchmark():
    from course_utils import scaling
    from course_utils.lessons.nb07_transformer_block import recipe as nb07

    assert nb11.fit_exponent is scaling.fit_exponent is nb07.fit_exponent
    assert scaling.fit_exponent({64: 1.0}) != scaling.fit_exponent({64: 1.0})  # NaN: one point
    linear = {n: 3.0 * n for n in (8, 16, 32, 64)}
    assert scaling.fit_exponent(linear) == pytest.approx(1.0)
    assert scaling.fit_exponent({**linear, 4: 1e6}) == pytest.approx(1.0)  # only the last 3


def test_sdpa_backend_status_separates_the_switch_from_what_runs_on_this_device():
    rows = {name: (switch, here) for name, switch, here in nb11.sdpa_backend_status("cpu")}
    assert rows["MATH"][1].startswith("runs on cpu")
    for name in nb11.CUDA_ONLY_BACKENDS:
        if name in rows:
            assert rows[name][1] == "not applicable on cpu (CUDA only)"
            assert rows[name][0] in ("enabled", "disabled")  # the switch is reported apart


def test_backend_errors_are_reported_as_whole_sentences():
    exc = RuntimeError("No viable backend was found. This is likely due to a long reason " * 3)
    assert nb11._first_sentence(exc) == "No viable backend was found."
    assert nb11._first_sentence(RuntimeError("no full stop at all")) == "no full stop at all"


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_tensor_parallel_block_equals_the_block_with_two_all_reduces(world_size):
    from course_utils.modeling.layers import TransformerBlock

    torch.manual_seed(0)
    block = TransformerBlock(16, 4, 32, norm_first=True).double().eval()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    with torch.no_grad():
        out, all_reduces = nb11.tensor_parallel_block(block, x, world_size)
        torch.testing.assert_close(out, block(x))
    assert all_reduces == 2  # after attention's W_O and after the MLP's second linear


def test_tensor_parallel_block_rejects_a_post_norm_block():
    from course_utils.modeling.layers import TransformerBlock

    with pytest.raises(ValueError, match="pre-norm"):
        nb11.tensor_parallel_block(TransformerBlock(8, 2, 16), torch.randn(1, 3, 8), 2)


def test_mean_of_shard_gradients_is_the_full_batch_gradient_of_the_gpt():
    model, (x, y) = nb11.gpt_demo_problem(seed=1, n=8)
    full, averaged = nb11.sharded_gradients(model, (x, y), world_size=4)
    assert set(full) == {k for k, _ in model.named_parameters()}
    for k in full:
        torch.testing.assert_close(averaged[k], full[k], rtol=0, atol=1e-12)
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(ValueError, match="divisible"):
        nb11.sharded_gradients(model, (x[:3], y[:3]), world_size=2)


def test_gpt_demo_worker_trains_in_one_process_and_reports_its_time():
    from course_utils.runtime.distributed import DistInfo

    out = nb11.demo_worker(DistInfo(0, 1, 0, torch.device("cpu"), None), 3, 8, model_name="gpt")
    assert len(out["loss"]) == 3 and out["train_seconds"] > 0
    with pytest.raises(ValueError, match="model_name"):
        nb11.demo_worker(DistInfo(0, 1, 0, torch.device("cpu"), None), 1, 8, model_name="cnn")
    demo = nb11.DataParallelDemo([out], out, 0.0, 1.0, 1.0, samples=24)
    parallel, single = demo.throughput()
    assert parallel == single == pytest.approx(24 / out["train_seconds"])
