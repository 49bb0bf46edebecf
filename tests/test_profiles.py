"""course_utils.runtime.profiles: profile choice, the COURSE_PROFILE override, ProfileTable and\npick(), seeding; every recipe states its sizes in one table naming all three profiles."""

from __future__ import annotations

import importlib
import inspect
import os
import random

import numpy as np
import pytest
import torch

from course_utils import lessons
from course_utils.runtime import profiles


def recipe_of(name: str):
    """The recipe module of lesson package ``name`` (``"nb08_gpt"``)."""
    return importlib.import_module(f"course_utils.lessons.{name}.recipe")


# every lesson with a recipe, from the registry (no hand list: a new lesson is checked too)
RECIPES = [f"nb{x.notebook}" for x in lessons.discover() if x.has("recipe")]
CONFIGURED = [name for name in RECIPES if hasattr(recipe_of(name), "config")]


@pytest.mark.parametrize("name", profiles.PROFILES)
def test_course_profile_environment_variable_overrides_detection(monkeypatch, name):
    monkeypatch.setenv(profiles.ENV_VAR, name.upper() + " ")  # case and spaces tolerated
    assert profiles.profile_name() == name
    p = profiles.current()
    assert p.name == name and p.source == profiles.ENV_VAR
    if name in ("ci", "cpu"):
        assert p.device == torch.device("cpu")  # never a GPU, even when one exists
    assert name in profiles.describe()


def test_invalid_profile_is_a_clear_error_listing_the_choices(monkeypatch):
    monkeypatch.setenv(profiles.ENV_VAR, "laptop")
    with pytest.raises(ValueError, match="'laptop' is not a profile; choose one of ci, cpu, gpu"):
        profiles.profile_name()


def test_auto_detection_picks_gpu_only_with_cuda(monkeypatch):
    monkeypatch.delenv(profiles.ENV_VAR, raising=False)
    expected = "gpu" if torch.cuda.is_available() else "cpu"
    assert profiles.profile_name() == expected
    assert profiles.current().source == "auto-detected"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert profiles.profile_name() == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert profiles.profile_name() == "gpu"


@pytest.mark.parametrize("name, expected", [("ci", 1), ("cpu", 2), ("gpu", 3)])
def test_pick_returns_the_value_of_the_active_profile(monkeypatch, name, expected):
    monkeypatch.setenv(profiles.ENV_VAR, name)
    assert profiles.pick(ci=1, cpu=2, gpu=3) == expected


def test_pick_and_a_table_need_all_three_profiles_no_fallback(monkeypatch):
    monkeypatch.setenv(profiles.ENV_VAR, "gpu")
    with pytest.raises(TypeError, match="gpu"):
        profiles.pick(ci="small", cpu="medium")
    with pytest.raises(TypeError, match="gpu"):
        profiles.ProfileTable(ci="small", cpu="medium")


@pytest.mark.parametrize("name, expected", [("ci", 1), ("cpu", 2), ("gpu", 3)])
def test_a_table_gives_the_active_or_the_named_profiles_row(monkeypatch, name, expected):
    table = profiles.ProfileTable(ci=1, cpu=2, gpu=3)
    monkeypatch.setenv(profiles.ENV_VAR, name)
    assert table.current() == expected == table.for_profile()
    monkeypatch.setenv(profiles.ENV_VAR, "ci" if name != "ci" else "gpu")
    assert table.for_profile(name) == expected  # a named profile wins over the environment
    assert table.items() == (("ci", 1), ("cpu", 2), ("gpu", 3))
    with pytest.raises(ValueError, match="'laptop'"):
        table.for_profile("laptop")


def test_best_device_prefers_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    mps = getattr(torch.backends, "mps", None)
    if mps is not None:
        monkeypatch.setattr(mps, "is_available", lambda: False)
    assert profiles.best_device() == torch.device("cpu")
    if mps is not None:
        monkeypatch.setattr(mps, "is_available", lambda: True)
        assert profiles.best_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert profiles.best_device() == torch.device("cuda")


def test_seed_everything_makes_python_numpy_and_torch_repeatable():
    def draw():
        g = profiles.seed_everything(123)
        return (
            random.random(),
            float(np.random.rand()),
            float(torch.rand(())),
            float(torch.rand((), generator=g)),
        )

    first, second = draw(), draw()
    assert first == second
    profiles.seed_everything(124)
    assert random.random() != first[0]


def test_seed_everything_returns_a_generator_seeded_like_torch():
    g = profiles.seed_everything(7)
    assert isinstance(g, torch.Generator) and g.initial_seed() == 7
    assert torch.equal(
        torch.rand(3, generator=g), torch.rand(3, generator=torch.Generator().manual_seed(7))
    )


def test_using_profile_sets_the_variable_for_the_block_and_restores_it(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "cpu")
    with profiles.using_profile("ci"):
        assert profiles.profile_name() == "ci"
    assert os.environ["COURSE_PROFILE"] == "cpu"
    monkeypatch.delenv("COURSE_PROFILE")
    with pytest.raises(RuntimeError), profiles.using_profile("gpu"):
        assert os.environ["COURSE_PROFILE"] == "gpu"
        raise RuntimeError("the block failed")
    assert "COURSE_PROFILE" not in os.environ  # restored to unset, even after an error
    with profiles.using_profile(None):
        assert "COURSE_PROFILE" not in os.environ


def _tables(module) -> dict[str, profiles.ProfileTable]:
    return {k: v for k, v in vars(module).items() if isinstance(v, profiles.ProfileTable)}


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_states_its_sizes_in_tables_of_all_three_profiles(name):
    module = recipe_of(name)
    tables = _tables(module)
    assert tables, f"{name} has no ProfileTable"
    for table in tables.values():
        rows = dict(table.items())
        assert set(rows) == set(profiles.PROFILES)
        assert len({type(row) for row in rows.values()}) == 1  # one kind of row per table
    source = inspect.getsource(module)
    assert "pick(" not in source  # one form: the table, not per-field picks
    assert 'name == "gpu"' not in source and '"gpu": ' not in source  # nor ternaries or dicts


def test_a_module_that_does_not_state_its_sizes_in_a_table_is_found():
    from course_utils import plots

    assert _tables(plots) == {}


@pytest.mark.parametrize("name", CONFIGURED)
@pytest.mark.parametrize("profile", profiles.PROFILES)
def test_a_recipes_config_is_its_tables_row_named_or_active(monkeypatch, name, profile):
    module = recipe_of(name)
    monkeypatch.setenv(profiles.ENV_VAR, profile)
    assert module.config() == module.config(profile)
    other = "ci" if profile != "ci" else "cpu"
    assert module.config(other) != module.config(profile)  # every profile is sized differently


def test_the_cpu_sizes_the_stored_outputs_come_from_are_unchanged():
    """Spot checks of the ci and cpu sizes the stored notebook outputs were made with."""
    from course_utils.lessons.nb01_rnn_bottleneck import recipe as nb01
    from course_utils.lessons.nb03_scaled_dot_product import recipe as nb03
    from course_utils.lessons.nb06_multi_head import recipe as nb06
    from course_utils.lessons.nb08_gpt import recipe as nb08
    from course_utils.lessons.nb09_vit import recipe as nb09
    from course_utils.lessons.nb11_attention_at_scale import recipe as nb11

    assert (nb01.RECIPES.ci.steps, nb01.RECIPES.cpu.steps, nb01.RECIPES.cpu.hidden_sizes) == (
        160,
        800,
        (32, 64, 128, 256),
    )
    assert nb03.config("cpu").dims[-1] == 2048 and nb03.config("ci").n_pairs == 8_000
    assert (nb06.config("ci").lr, nb06.config("cpu").time_heads[-1]) == (1e-2, 64)
    assert nb08.config("cpu").model.d_model == 128 and nb08.config("cpu").steps == 1100
    assert nb09.config("cpu", dataset="digits").train.epochs == 30
    assert nb11.config("ci").lengths == (128, 256, 512, 1024)


def test_a_recipe_config_is_a_copy_the_table_keeps_its_sizes():
    from course_utils.lessons.nb08_gpt import recipe as nb08

    cfg = nb08.config("gpu")
    cfg.model.n_layers = 1  # GPTConfig is mutable: the table must not change with it
    assert nb08.RECIPES.gpu.model.n_layers == nb08.config("gpu").model.n_layers != 1


@pytest.mark.parametrize("profile", profiles.PROFILES)
def test_notebook_01_and_02s_recipe_is_the_tables_row(monkeypatch, profile):
    from course_utils.lessons.nb01_rnn_bottleneck import recipe as nb01
    from course_utils.lessons.nb02_additive_attention import recipe as nb02

    monkeypatch.setenv(profiles.ENV_VAR, profile)
    assert nb01.recipe() == nb01.recipe(profile) == nb01.RECIPES.for_profile(profile)
    assert nb01.recipe().profile == profile  # each row names its own profile
    assert nb02.train_max_len(nb01.recipe()) == nb02.TRAIN_MAX_LEN.for_profile(profile)


def test_notebook_09s_data_set_preference_ends_with_the_bundled_digits(monkeypatch):
    from course_utils.lessons.nb09_vit import recipe as nb09
    from course_utils.lessons.nb09_vit import sizes

    assert all(row[-1] == "digits" for _, row in nb09.DATASET_PREFERENCE.items())
    monkeypatch.setattr(sizes, "find_cifar10", lambda: "cifar.tar.gz")
    monkeypatch.setattr(sizes, "find_mnist", lambda: None)
    assert [nb09.default_dataset(p) for p in profiles.PROFILES] == ["digits", "digits", "cifar10"]
    monkeypatch.setattr(sizes, "find_cifar10", lambda: None)
    monkeypatch.setattr(sizes, "find_mnist", lambda: "mnist/")
    assert [nb09.default_dataset(p) for p in profiles.PROFILES] == ["digits", "mnist", "mnist"]
