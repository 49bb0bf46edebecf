"""Check 09.1 (patchify) accepts correct answers written differently and names each classic
mistake. The wrong answers here are written independently of the check's own.

The 09.2 check (ViT forward pass) accepts correct answers written differently, rejects each
classic mistake with a hint naming it, and refuses the shortcut model(images).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from checks_testing import (
    assert_no_hint_prints_a_solution_line,
    assert_passes,
    assert_registered_mistakes_named,
    assert_rejected,
    mistake_names,
)
from torch import nn

from course_utils import checks
from course_utils.checks import ERROR, NOT_ATTEMPTED, get, run
from course_utils.lessons.nb09_vit.exercises import VIT_MISTAKES, vit_forward
from course_utils.modeling.models import ViT, ViTConfig, patchify

ID = "09.1"


def patch_unfold(images, p):
    return F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)


def patch_tensor_unfold(images, p):
    B, C = images.shape[:2]
    x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, gh, gw, p, p)
    return x.permute(0, 2, 3, 1, 4, 5).reshape(B, -1, C * p * p)


def patch_loops(images, p):
    B, C, H, W = images.shape
    rows = [
        images[:, :, r : r + p, c : c + p].reshape(B, -1)
        for r in range(0, H, p)
        for c in range(0, W, p)
    ]
    return torch.stack(rows, dim=1)


@pytest.mark.parametrize("candidate", [patch_tensor_unfold, patch_loops, patchify])
def test_patchify_check_accepts_correct_answers(candidate):
    assert_passes(ID, candidate)


def patch_column_order(images, p):
    B, C, H, W = images.shape
    cols = [
        images[:, :, r : r + p, c : c + p].reshape(B, -1)
        for c in range(0, W, p)
        for r in range(0, H, p)
    ]
    return torch.stack(cols, dim=1)


def patch_channels_last(images, p):
    B, C, H, W = images.shape
    rows = [
        images[:, :, r : r + p, c : c + p].permute(0, 2, 3, 1).reshape(B, -1)
        for r in range(0, H, p)
        for c in range(0, W, p)
    ]
    return torch.stack(rows, dim=1)


def patch_transposed(images, p):
    B, C, H, W = images.shape
    rows = [
        images[:, :, r : r + p, c : c + p].transpose(-1, -2).reshape(B, -1)
        for r in range(0, H, p)
        for c in range(0, W, p)
    ]
    return torch.stack(rows, dim=1)


WRONG = {
    "patches in column order (top to bottom, then left to right)": patch_column_order,
    "each patch flattened as (p, p, C) instead of (C, p, p)": patch_channels_last,
    "each patch transposed (flattened as (C, p_w, p_h))": patch_transposed,
    "plain reshape without permuting (pixels of different patches mixed)": lambda images, p: (
        images.reshape(images.shape[0], -1, images.shape[1] * p * p)
    ),
    "returned (B, C*p*p, N) (F.unfold without transpose)": lambda images, p: F.unfold(
        images, p, stride=p
    ),
}


@pytest.mark.parametrize("mistake", sorted(WRONG))
def test_patchify_check_names_each_classic_mistake(mistake):
    assert_rejected(ID, WRONG[mistake], mistake)


def test_patchify_check_covers_every_registered_mistake():
    assert set(WRONG) == mistake_names(ID)
    assert_registered_mistakes_named(ID)


def test_patchify_cases_use_rectangular_colour_images():
    cases = checks.get(ID).make_cases(0)
    shapes = [tuple(c.inputs["images"].shape) for c in cases]
    assert any(C == 3 and H != W for _, C, H, W in shapes)


# ----------------------------------------------------------------------------- 09.2 the ViT forward pass
SEEDS = (0, 1)


def _patch_size(model):
    p = model.config.patch_size
    return p if isinstance(p, int) else p[0]


def forward_by_hand(model, images):
    """Correct, written differently: patchify + proj by hand, positions added in two parts,
    F.layer_norm with the norm's parameters, the head as a matrix product."""
    tokens = patchify(images, _patch_size(model)) @ model.patch_embed.proj.weight.T
    tokens = tokens + model.patch_embed.proj.bias
    if model.cls_token is not None:
        cls = model.cls_token + model.pos_embed[:, :1]  # (1, 1, D)
        tokens = tokens + model.pos_embed[:, 1:]
        x = torch.cat([cls.expand(len(images), -1, -1), tokens], dim=1)
    else:
        x = tokens + model.pos_embed
    x = nn.Sequential(*model.blocks)(x)
    x = F.layer_norm(x, x.shape[-1:], model.norm.weight, model.norm.bias, model.norm.eps)
    pooled = x[:, 0, :] if model.config.pool == "cls" else x.sum(dim=1) / x.shape[1]
    return pooled @ model.head.weight.T + model.head.bias


def forward_head_on_every_token(model, images):
    """Correct, written differently: the head on every token, then select / average (the head
    is linear, so averaging logits equals the logits of the average)."""
    x = model.patch_embed(images)
    B = x.shape[0]
    if model.config.pool == "cls":
        x = torch.cat([model.cls_token.repeat(B, 1, 1), x], dim=1)
    x = x + model.pos_embed
    for i in range(len(model.blocks)):
        x = model.blocks[i](x)
    logits = model.head(model.norm(x))  # (B, L, K)
    return logits[:, 0] if model.config.pool == "cls" else logits.mean(dim=1)


def test_reference_passes_its_own_check():
    assert_passes("09.2", vit_forward, SEEDS)


@pytest.mark.parametrize("answer", [forward_by_hand, forward_head_on_every_token])
def test_correct_answers_written_differently_pass(answer):
    assert_passes("09.2", answer, SEEDS)


def test_exercise_is_registered_for_notebook_09():
    ex = get("09.2")
    assert (ex.function, ex.notebook, ex.points) == ("vit_forward", "09_vit.ipynb", 3)


@pytest.mark.parametrize("mistake", VIT_MISTAKES, ids=lambda m: m.name)
def test_each_registered_mistake_is_rejected_and_named(mistake):
    for seed in SEEDS:
        result = run("09.2", mistake.impl, seed=seed)
        assert result.status == "failed" and result.points == 0, result.message
        assert result.mistake == mistake.name, f"seed {seed}: {result.message}"
        assert f"Likely mistake: {mistake.name}. Hint: {mistake.hint}" in result.message


# Mistakes as a student would write them (not the registered implementations)


def no_class_token(model, images):
    x = model.patch_embed(images)
    x = x + model.pos_embed[:, 1:] if model.cls_token is not None else x + model.pos_embed
    for block in model.blocks:
        x = block(x)
    x = model.norm(x)
    return model.head(x[:, 0] if model.config.pool == "cls" else x.mean(1))


def class_token_last(model, images):
    x = model.patch_embed(images)
    if model.cls_token is not None:
        x = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
    x = x + model.pos_embed
    for block in model.blocks:
        x = block(x)
    x = model.norm(x)
    return model.head(x[:, -1] if model.config.pool == "cls" else x.mean(1))


def without_positions(model, images):
    x = model.patch_embed(images)
    if model.cls_token is not None:
        x = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
    for block in model.blocks:
        x = block(x)
    x = model.norm(x)
    return model.head(x[:, 0] if model.config.pool == "cls" else x.mean(1))


def without_final_norm(model, images):
    x = model.patch_embed(images)
    if model.cls_token is not None:
        x = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
    x = x + model.pos_embed
    for block in model.blocks:
        x = block(x)
    return model.head(x[:, 0] if model.config.pool == "cls" else x.mean(1))


def always_mean(model, images):
    x = model.patch_embed(images)
    if model.cls_token is not None:
        x = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
    x = model.norm(nn.Sequential(*model.blocks)(x + model.pos_embed))
    return model.head(x.mean(1))


def always_first_token(model, images):
    x = model.patch_embed(images)
    if model.cls_token is not None:
        x = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
    x = model.norm(nn.Sequential(*model.blocks)(x + model.pos_embed))
    return model.head(x[:, 0])


def patches_not_projected(model, images):
    x = patchify(images, _patch_size(model))
    if model.cls_token is not None:
        x = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
    x = model.norm(nn.Sequential(*model.blocks)(x + model.pos_embed))
    return model.head(x[:, 0] if model.config.pool == "cls" else x.mean(1))


@pytest.mark.parametrize(
    "answer, mistake",
    [
        (no_class_token, "class token not prepended"),
        (class_token_last, "class token taken from the last position"),
        (without_positions, "position embeddings missing"),
        (without_final_norm, "no final LayerNorm"),
        (always_mean, "mean pooling on a class-token model"),
        (always_first_token, "class-token pooling on a mean-pooling model"),
        (patches_not_projected, "patchify without projection"),
    ],
    ids=lambda x: getattr(x, "__name__", None) or x,
)
def test_student_written_mistakes_are_named(answer, mistake):
    assert_rejected("09.2", answer, mistake, seeds=(2,))


def test_calling_the_whole_model_is_refused_with_a_clear_message():
    result = run("09.2", lambda model, images: model(images))
    assert result.status == ERROR
    assert "submodules" in result.message and "model.forward" in result.message


def test_untouched_stub_is_not_attempted():
    def stub(model, images):
        raise NotImplementedError("Exercise 09.2: implement vit_forward")

    assert run("09.2", stub).status == NOT_ATTEMPTED


def test_reference_matches_the_course_vit_forward():
    for pool in ("cls", "mean"):
        torch.manual_seed(0)
        model = ViT(
            ViTConfig(image_size=8, patch_size=2, d_model=16, n_layers=2, n_heads=2, pool=pool)
        ).eval()
        with torch.no_grad():
            nn.init.normal_(model.head.weight)  # the course ViT starts with a zero head
            images = torch.rand(3, 1, 8, 8)
            torch.testing.assert_close(vit_forward(model, images), model(images))


@pytest.mark.parametrize("exercise_id", ["09.1", "09.2"])
def test_no_hint_prints_a_solution_line(exercise_id):
    assert_no_hint_prints_a_solution_line(exercise_id)


# ----------------------------------------------------------------------------- student D's report
# (reviews/turn4/student-D.md): the 09 false acceptances and shortcuts, by name.

from checks_testing import assert_not_accepted  # noqa: E402


def test_D_FA6_09_2_mutating_the_models_parameters_is_rejected():
    def mutating(model, images):
        out = vit_forward(model, images)
        with torch.no_grad():
            model.pos_embed.zero_()
        return out

    result = run("09.2", mutating)
    assert result.status == "failed" and "changed the model's parameter 'pos_embed'" in (
        result.message
    )


def test_D_FA7_09_1_a_float32_result_for_float64_input_is_rejected():
    def down(images, p):
        return patch_tensor_unfold(images.float(), p)

    assert_not_accepted("09.1", down, "dtype torch.float32, expected torch.float64")


def test_D_shortcut_09_1_f_unfold_and_nn_unfold_are_refused():
    def unfold_module(images, p):
        return nn.Unfold(p, stride=p)(images).transpose(1, 2)

    for candidate in (patch_unfold, unfold_module):
        assert_not_accepted("09.1", candidate, "aten::im2col", seeds=(0,))


def test_09_1_tensor_unfold_and_an_identity_kernel_conv_still_pass():
    def conv(images, p):
        C = images.shape[1]
        w = torch.eye(C * p * p, dtype=images.dtype).reshape(C * p * p, C, p, p)
        return F.conv2d(images, w, stride=p).flatten(2).transpose(1, 2)

    for candidate in (patch_tensor_unfold, conv):
        result = run("09.1", candidate, own_work=True)
        assert result.passed, result.message


def test_D_shortcut_09_2_rebuilding_vit_from_the_config_is_refused():
    def rebuilt(model, images):
        m = ViT(model.config).to(images.dtype)
        m.load_state_dict(model.state_dict())
        return m(images)

    assert_not_accepted("09.2", rebuilt, "ViT.forward", seeds=(0,))


def test_D_09_2_no_projection_keeps_its_named_diagnosis_when_a_later_case_raises():
    """The check names the mistake on the case built for it even though a later case raises
    (core.verdict, which the grader is to call on its harvest too)."""
    name = "patchify without projection"
    impl = next(m.impl for m in VIT_MISTAKES if m.name.startswith(name))
    result = run("09.2", impl, seed=4)
    assert result.status == "failed" and f"Likely mistake: {name}" in result.message


# ----------------------------------------------------------------------------- every seed
# What tests/test_same_verdict_every_seed.py sweeps over many seeds, by exercise: the correct
# answers written differently, and the wrong ones by the name of the mistake they make.
SWEEP_CORRECT = {
    ID: [patch_tensor_unfold, patch_loops],
    "09.2": [forward_by_hand, forward_head_on_every_token],
}
SWEEP_WRONG = {ID: WRONG}
