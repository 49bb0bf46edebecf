"""Checks for notebook 09 (the Vision Transformer): 09.1 patchify, 09.2 the ViT forward pass.

Convention (``course_utils.modeling.models.patchify``): images (B, C, H, W) -> patches (B, N, C*p*p),
patches numbered row-major (left to right, then top to bottom), each flattened in (C, p, p)
order -- exactly ``F.unfold(images, p, stride=p).transpose(1, 2)``.

09.2: the ViT forward pass.

The student writes ``vit_forward(model, images) -> logits`` from the submodules of the course's
:class:`course_utils.modeling.models.ViT` (slide 51)::

    x = model.patch_embed(images)                  # (B, N, D)  patchify + linear projection
    prepend model.cls_token (when not None)        # (B, N+1, D)
    x = x + model.pos_embed                        # learned positions, one per token
    for block in model.blocks: x = block(x)        # the same pre-norm blocks as for text
    x = model.norm(x)                              # final LayerNorm, on every token
    pooled = x[:, 0] (pool "cls") or x.mean(1) (pool "mean")
    logits = model.head(pooled)                    # (B, num_classes)

The check builds seeded float64 ViTs (a class-token model whose width equals the patch length,
so that forgetting the projection still runs, larger class-token models, a mean-pooling model
and a single image) and compares with the course's forward. The model handed to the student
refuses ``model(images)``, ``forward_features``, ``embed`` and ``pool``: the exercise is to
write those steps. (Patchify itself, 09.1, lives in ``nb09_vit.py``.)
"""

from __future__ import annotations

import torch
from torch import Tensor

from course_utils.checks._common import as_tensor, build_module, close, random_weights, size
from course_utils.checks.core import Case, Contract, Exercise, Mistake, generator, randn
from course_utils.lessons.nb09_vit import LESSON
from course_utils.modeling.models.vit import ViT, ViTConfig, patchify

NOTEBOOK = LESSON.filename

# ----------------------------------------------------------------------------- 09.1 patchify


def _patch_cases(seed: int) -> list[Case]:
    g = generator(seed)
    p = size(g, 2, 4)
    gh = size(g, 2, 4)
    gw = gh + size(g, 1, 2)  # a wider grid than tall: row and column order differ

    def case(name: str, B: int, C: int, gh: int, gw: int, p: int) -> Case:
        return Case(name, {"images": randn(g, B, C, gh * p, gw * p), "patch_size": p})

    return [
        case("colour images, wider than tall", size(g, 2, 3), 3, gh, gw, p),
        case("taller than wide", 2, 3, gw, gh, p),
        case("one channel", 2, 1, gh, gw, p),
        case("one patch per image", 2, 2, 1, 1, p),
        case("patch size 1", 1, 2, gh, gw, 1),
    ]


def _patch_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    return {
        "patches": as_tensor(
            candidate(i["images"], i["patch_size"]), "patchify(images, patch_size)"
        )
    }


def _grid(images: Tensor, p: int) -> Tensor:
    B, C, H, W = images.shape
    return images.reshape(B, C, H // p, p, W // p, p)  # (B, C, gh, ph, gw, pw)


def _ordered(perm: tuple[int, ...]):
    """Patches from the (B, C, gh, ph, gw, pw) grid permuted by ``perm`` then flattened."""

    def impl(images: Tensor, patch_size: int) -> Tensor:
        B, C, H, W = images.shape
        p = patch_size
        return _grid(images, p).permute(*perm).reshape(B, (H // p) * (W // p), C * p * p)

    return impl


def _plain_reshape(images: Tensor, patch_size: int) -> Tensor:
    B, C, H, W = images.shape
    return images.reshape(B, -1, C * patch_size * patch_size)


def _unfold_no_transpose(images: Tensor, patch_size: int) -> Tensor:
    return torch.nn.functional.unfold(images, patch_size, stride=patch_size)


PATCH_MISTAKES = [
    Mistake(
        "patches in column order (top to bottom, then left to right)",
        "number the patches row by row, as you read: left to right along the first row of "
        "the grid, then the next row (grid axes in the order (gh, gw))",
        _ordered((0, 4, 2, 1, 3, 5)),
    ),
    Mistake(
        "each patch flattened as (p, p, C) instead of (C, p, p)",
        "flatten each patch channel first, (C, p, p), the order of F.unfold and of a "
        "Conv2d patch embedding's weight",
        _ordered((0, 2, 4, 3, 5, 1)),
    ),
    Mistake(
        "each patch transposed (flattened as (C, p_w, p_h))",
        "inside a patch keep rows before columns: (C, ph, pw)",
        _ordered((0, 2, 4, 1, 5, 3)),
    ),
    Mistake(
        "plain reshape without permuting (pixels of different patches mixed)",
        "a reshape alone cuts the image in raster order, not into p x p squares: first split "
        "each image axis into (which patch, where inside it), then move the two grid axes in "
        "front of the channel and in-patch axes, and only then flatten",
        _plain_reshape,
    ),
    Mistake(
        "returned (B, C*p*p, N) (F.unfold without transpose)",
        "one row per patch: F.unfold gives one COLUMN per patch, (B, C*p*p, N); the "
        "exercise wants the patches along the second axis, (B, N, C*p*p)",
        _unfold_no_transpose,
    ),
]

PATCHIFY = Exercise(
    id="09.1",
    title="Cut images into patches",
    points=2,
    notebook=NOTEBOOK,
    function="patchify",
    reference=patchify,
    make_cases=_patch_cases,
    call=_patch_call,
    mistakes=PATCH_MISTAKES,
    compare=close(),
    hint="fill a small image with torch.arange and print patches[0, n]: is patch n the one "
    "the prompt's numbering says (row-major over the grid), are its C*p*p values in (C, p, p) "
    "order, and are they the image's values unchanged (same dtype)?",
    concepts=("patch embedding",),
    contract=Contract(float32=True, differentiable=("images",)),
)


# ----------------------------------------------------------------------------- 09.2 the ViT forward pass
_SHORTCUT = (
    "vit_forward should build the forward pass from the model's submodules "
    "(patch_embed, cls_token, pos_embed, blocks, norm, head); calling model.{name} "
    "skips the exercise"
)


class _StudentViT(ViT):
    """The course ViT with its whole-model shortcuts disabled (submodules unchanged)."""

    def _refuse(self, name: str):
        raise RuntimeError(_SHORTCUT.format(name=name))

    def forward(self, images):  # noqa: D102
        self._refuse("forward (model(images))")

    def forward_features(self, images):  # noqa: D102
        self._refuse("forward_features")

    def embed(self, images):  # noqa: D102
        self._refuse("embed")

    def pool(self, tokens):  # noqa: D102
        self._refuse("pool")


# ----------------------------------------------------------------------------- reference


def vit_forward(model: ViT, images: Tensor) -> Tensor:
    """The ViT forward pass from ``model``'s submodules: images (B, C, H, W) -> logits (B, K)."""
    x = model.patch_embed(images)  # (B, N, D)
    if model.cls_token is not None:
        cls = model.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
        x = torch.cat([cls, x], dim=1)  # (B, N+1, D): the class token is token 0
    x = model.pos_drop(x + model.pos_embed)  # (B, L, D)
    for block in model.blocks:
        x = block(x)
    x = model.norm(x)  # (B, L, D)
    pooled = x[:, 0] if model.config.pool == "cls" else x.mean(dim=1)  # (B, D)
    return model.head(pooled)  # (B, num_classes)


# ----------------------------------------------------------------------------- cases


def _config(i: dict) -> ViTConfig:
    return ViTConfig(
        image_size=(i["height"], i["width"]),
        patch_size=i["patch_size"],
        in_channels=i["in_channels"],
        num_classes=i["num_classes"],
        d_model=i["d_model"],
        n_layers=i["n_layers"],
        n_heads=i["n_heads"],
        d_ff=i["d_ff"],
        pool="cls" if i["cls_token"] else "mean",
    )


def _vit_cases(seed: int) -> list[Case]:
    g = generator(seed)

    def case(
        name: str,
        *,
        B: int,
        C: int,
        p: int,
        gh: int,
        gw: int,
        H: int,
        Dh: int,
        layers: int,
        cls_token: bool,
    ) -> Case:
        D = H * Dh
        inputs = {
            "height": gh * p,
            "width": gw * p,
            "patch_size": p,
            "in_channels": C,
            "num_classes": size(g, 3, 6),
            "d_model": D,
            "n_layers": layers,
            "n_heads": H,
            "d_ff": 2 * D,
            "cls_token": cls_token,
        }
        with torch.random.fork_rng(devices=[]):
            shapes = {n: tuple(w.shape) for n, w in ViT(_config(inputs)).named_parameters()}
        inputs.update(random_weights(g, shapes))
        inputs["images"] = randn(g, B, C, gh * p, gw * p)
        return Case(name, inputs)

    gh = size(g, 2, 3)
    gw = gh + 1  # wider than tall
    return [
        # first: the width equals the patch length C*p*p (3*2*2 = 12), so an answer that
        # forgets the projection still runs and can be named
        case(
            "class token, width = patch length",
            B=size(g, 2, 3),
            C=3,
            p=2,
            gh=gh,
            gw=gw,
            H=3,
            Dh=4,
            layers=2,
            cls_token=True,
        ),
        case(
            "class token, deeper",
            B=size(g, 2, 3),
            C=size(g, 1, 3),
            p=size(g, 2, 3),
            gh=gw,
            gw=gh,
            H=size(g, 2, 3),
            Dh=size(g, 3, 5),
            layers=3,
            cls_token=True,
        ),
        case(
            "mean pooling (no class token)",
            B=size(g, 2, 3),
            C=1,
            p=2,
            gh=gh,
            gw=gw,
            H=2,
            Dh=size(g, 3, 5),
            layers=2,
            cls_token=False,
        ),
        case("one image", B=1, C=2, p=2, gh=2, gw=2, H=2, Dh=3, layers=1, cls_token=True),
    ]


def _vit_call(candidate, case: Case) -> dict[str, Tensor]:
    i = case.inputs
    model = build_module(_StudentViT, (_config(i),), {}, i, "ViT")
    logits = candidate(model, i["images"])
    return {"logits": as_tensor(logits, "vit_forward(model, images)")}


# ----------------------------------------------------------------------------- mistakes


def _variant(*, tokens="prepend", positions=True, norm="tokens", pool="config", project=True):
    """A wrong ``vit_forward``: each keyword switches one step away from the reference.

    tokens: "prepend" | "append" (class token after the patches) | "none" (no class token,
    positions of the patches only) | "no_cls_position" (class token prepended after the
    positions were added to the patches). positions: add pos_embed. norm: "tokens" (final
    LayerNorm on every token) | "none" | "after_pool". pool: "config" | "first" | "last" |
    "mean" | "mean_patches" (mean without the class token). project: apply the projection.
    """

    def impl(model: ViT, images: Tensor) -> Tensor:
        if project:
            x = model.patch_embed(images)
        else:
            x = patchify(images, model.config.patch_size)  # (B, N, C*p*p), no Linear
        B = x.shape[0]
        has_cls = model.cls_token is not None
        cls = model.cls_token.expand(B, -1, -1) if has_cls else None
        pe = model.pos_embed if positions else torch.zeros_like(model.pos_embed)
        if not has_cls:
            x = x + pe
        elif tokens == "prepend":
            x = torch.cat([cls, x], dim=1) + pe
        elif tokens == "append":
            x = torch.cat([x, cls], dim=1) + pe
        elif tokens == "none":
            x = x + pe[:, 1:]
        elif tokens == "no_cls_position":
            x = torch.cat([cls, x + pe[:, 1:]], dim=1)
        for block in model.blocks:
            x = block(x)
        if norm == "tokens":
            x = model.norm(x)
        mode = pool if pool != "config" else ("first" if model.config.pool == "cls" else "mean")
        pooled = {
            "first": lambda: x[:, 0],
            "last": lambda: x[:, -1],
            "mean": lambda: x.mean(dim=1),
            "mean_patches": lambda: x[:, 1:].mean(dim=1) if has_cls else x.mean(dim=1),
        }[mode]()
        if norm == "after_pool":
            pooled = model.norm(pooled)
        return model.head(pooled)

    return impl


def _pool_by_kind(on_cls: str, on_mean: str):
    """A wrong vit_forward that pools ``on_cls`` for a class-token model, ``on_mean`` else."""
    cls_impl, mean_impl = _variant(pool=on_cls), _variant(pool=on_mean)

    def impl(model: ViT, images: Tensor) -> Tensor:
        return (cls_impl if model.cls_token is not None else mean_impl)(model, images)

    return impl


VIT_MISTAKES = [
    Mistake(
        "class token not prepended",
        "a class-token model puts its class token, repeated for every image of the batch, in "
        "FRONT of the patch tokens (N + 1 tokens), then adds the N + 1 position embeddings, "
        "and reads the class token at position 0 after the blocks",
        _variant(tokens="none"),
    ),
    Mistake(
        "class token appended after the patches",
        "the class token is token 0: it goes in front of the patch tokens, not after them, "
        "and row 0 of the position embeddings belongs to it",
        _variant(tokens="append"),
    ),
    Mistake(
        "class token appended after the patches and read from the last position",
        "the class token is token 0: it goes in front of the patch tokens, row 0 of the "
        "position embeddings belongs to it, and it is read back from position 0",
        _variant(tokens="append", pool="last"),
    ),
    Mistake(
        "class token taken from the last position",
        "after the blocks the class token is still at position 0: read that token, not "
        "the last one (a patch)",
        _pool_by_kind("last", "mean"),
    ),
    Mistake(
        "class token without its position embedding",
        "add the position embeddings after the class token is in place: their row 0 is the "
        "class token's position",
        _variant(tokens="no_cls_position"),
    ),
    Mistake(
        "position embeddings missing",
        "add the learned position embeddings to every token (after the class token is in "
        "place); without them the blocks see a bag of patches",
        _variant(positions=False),
    ),
    Mistake(
        "no final LayerNorm",
        "the pre-norm blocks leave the residual stream unnormalised: the model's final "
        "LayerNorm acts on every token after the last block, before pooling",
        _variant(norm="none"),
    ),
    Mistake(
        "final LayerNorm applied after pooling",
        "the final LayerNorm acts on every token after the last block, and pooling comes "
        "after it (for mean pooling, normalising the average is not the same)",
        _variant(norm="after_pool"),
    ),
    Mistake(
        "mean pooling on a class-token model",
        "a model whose config says pool 'cls' is summarised by its class token's final "
        "state; average the tokens only when the config says 'mean'",
        _pool_by_kind("mean", "mean"),
    ),
    Mistake(
        "mean pooling over the patches on a class-token model",
        "a model whose config says pool 'cls' is summarised by its class token's final "
        "state; average the tokens only when the config says 'mean'",
        _pool_by_kind("mean_patches", "mean"),
    ),
    Mistake(
        "class-token pooling on a mean-pooling model",
        "a model whose config says pool 'mean' has no class token: its summary is the "
        "average over the tokens, not the first token (a patch)",
        _pool_by_kind("first", "first"),
    ),
    Mistake(
        "patchify without projection",
        "the patches (B, N, C*p*p) must be projected to the model width: the model's patch "
        "embedding module does the patchify and the linear map E together",
        _variant(project=False),
    ),
]

VIT_FORWARD = Exercise(
    id="09.2",
    title="The ViT forward pass",
    points=3,
    notebook=NOTEBOOK,
    function="vit_forward",
    reference=vit_forward,
    make_cases=_vit_cases,
    call=_vit_call,
    mistakes=VIT_MISTAKES,
    compare=close(),
    hint="print the shape of x after each step of your forward next to the prompt's "
    "equations: how many tokens before and after the class token, which tokens get a "
    "position, where does the final norm act, and which row(s) does the pooling read in "
    "each of the two pooling modes?",
    concepts=("ViT forward",),
    contract=Contract(float32=True, differentiable=("w:*",)),
)

EXERCISES = [PATCHIFY, VIT_FORWARD]
