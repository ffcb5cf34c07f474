"""The recipe table, get_recipe, and the Quantizer / Recipe checks (no
compiling: these build recipes only)."""
from __future__ import annotations

import dataclasses

import pytest

from jaxfp8 import recipes
from jaxfp8._src.recipes import mx_recipe
from jaxfp8._src.recipes import registry
from jaxfp8.recipes import Quantizer
from jaxfp8.recipes import Recipe

NVFP4_FIELDS = ("rht", "stochastic", "weight_block", "tensor_scale")


@pytest.mark.parametrize("name", list(recipes.RECIPES))
def test_every_entry_builds_and_is_documented(name):
  entry = recipes.RECIPES[name]
  r = recipes.get_recipe(name)
  assert isinstance(r, Recipe) and r.name == name and r.quantized
  for text in (entry.summary, entry.source, entry.hardware):
    assert isinstance(text, str) and len(text) > 10
  assert r.state_roles == (("x", "w", "dy") if name == "fp8_delayed" else ())
  state = recipes.init_state(name)
  assert (state is None) == (name != "fp8_delayed")
  assert r.needs_key == name.startswith("nvfp4")


def test_table_rows_are_the_registry():
  rows = recipes.recipe_table()
  assert [row[0] for row in rows] == list(recipes.RECIPES)
  for name in ("bf16", "fp8_current", "fp8_delayed", "mxfp8", "mxfp8_hp_wgrad",
               "mxfp8_e5m2_grad", "mxfp4", "fp8_blockwise", "nvfp4",
               "nvfp4_no_rht", "nvfp4_no_sr", "nvfp4_1d_weights"):
    assert name in recipes.RECIPES


def test_fp8_blockwise_is_deepseek_v3_tiles_and_blocks():
  r = recipes.get_recipe("fp8_blockwise")
  tile = Quantizer("block", "e4m3", block=(1, 128), scale="pow2")
  square = Quantizer("block", "e4m3", block=(128, 128), scale="pow2")
  assert (r.fwd, r.dgrad, r.wgrad) == ((tile, square), (tile, square),
                                       (tile, tile))
  f32 = recipes.get_recipe("fp8_blockwise", pow2_scales=False)
  assert {q.scale for g in ("fwd", "dgrad", "wgrad")
          for q in getattr(f32, g)} == {"float32"}
  assert f32.name == "fp8_blockwise(pow2_scales=False)"


def test_nvfp4_and_its_ablations():
  r = recipes.get_recipe("nvfp4")
  x = Quantizer("nvfp4", "e2m1", block=(1, 16))
  w = Quantizer("nvfp4", "e2m1", block=(16, 16))
  dy = Quantizer("nvfp4", "e2m1", block=(1, 16), rounding="stochastic")
  rht = lambda q: dataclasses.replace(q, transform="rht")
  assert (r.fwd, r.dgrad, r.wgrad) == ((x, w), (dy, w), (rht(x), rht(dy)))
  assert recipes.get_recipe("nvfp4_no_rht").wgrad == (x, dy)
  no_sr = recipes.get_recipe("nvfp4_no_sr")
  assert no_sr.dgrad == (x, w) and no_sr.wgrad == (rht(x), rht(x))
  one_d = recipes.get_recipe("nvfp4_1d_weights")
  assert one_d.fwd == (x, x) and one_d.dgrad == (dy, x)
  # the overrides name the same recipes
  for name, kw in (("nvfp4_no_rht", {"rht": False}),
                   ("nvfp4_no_sr", {"stochastic": False}),
                   ("nvfp4_1d_weights", {"weight_block": (1, 16)})):
    got = recipes.get_recipe("nvfp4", **kw)
    assert dataclasses.replace(got, name=name) == recipes.get_recipe(name)
  # an ablation's builder takes the same overrides, its own as default
  assert recipes.get_recipe("nvfp4_no_rht", rht=True).wgrad == r.wgrad
  pow2 = recipes.get_recipe("nvfp4", tensor_scale="pow2")
  assert pow2.fwd[0].scale == "pow2"


def test_per_tensor_recipes():
  cur = recipes.get_recipe("fp8_current")
  e4m3, e5m2 = Quantizer("tensor", "e4m3"), Quantizer("tensor", "e5m2")
  assert (cur.fwd, cur.dgrad, cur.wgrad) == ((e4m3, e4m3), (e5m2, e4m3),
                                             (e4m3, e5m2))
  dl = recipes.get_recipe("fp8_delayed", pow2_scales=True, margin=1)
  assert all(q.delayed and q.scale == "pow2" and q.margin == 1
             for q in dl.fwd + dl.dgrad + dl.wgrad)
  st = recipes.init_state(dl, history_length=4)
  assert (st["dy"].format, st["x"].power_of_two, st["w"].margin,
          st["x"].history_length) == ("float8_e5m2", True, 1, 4)
  bf16 = recipes.get_recipe("bf16")
  assert {q.format for q in bf16.fwd + bf16.dgrad + bf16.wgrad} == {"bfloat16"}


def test_mx_recipes_read_as_the_mx_module_reads_them():
  for text in ("mxfp8", "mxfp8_hp_wgrad", "mxfp8_e5m2_grad", "mxfp4",
               "mxfp6_e2m3", "f=mxfp8_e4m3,d=mxfp8_e5m2,w=none,scale=floor"):
    want = registry.from_mx(mx_recipe.get_recipe(text))
    got = recipes.get_recipe(text)
    assert (got.fwd, got.dgrad, got.wgrad) == (want.fwd, want.dgrad,
                                               want.wgrad), text
  hp = recipes.get_recipe("mxfp8_hp_wgrad")
  assert hp.wgrad == (None, None) and hp.fwd[0].format == "mxfp8_e4m3"
  sr = recipes.get_recipe(mx_recipe.MXRecipe(stochastic_grad=True, block_size=16))
  assert sr.dgrad[0].stochastic and sr.wgrad[1].stochastic
  assert not (sr.fwd[0].stochastic or sr.dgrad[1].stochastic
              or sr.wgrad[0].stochastic)
  assert sr.fwd[0].block == (1, 16) and sr.fwd[0].scale == "rceil"
  assert recipes.get_recipe("mxfp8", scale_mode="floor").fwd[0].scale == "floor"
  # "nvfp4" is the training recipe here; the MX format is reached through MX
  assert recipes.get_recipe("nvfp4").fwd[0].kind == "nvfp4"
  assert recipes.get_recipe(mx_recipe.get_recipe("nvfp4")).fwd[0].kind == "mx"


def test_get_recipe_passes_recipes_and_none():
  r = recipes.get_recipe("mxfp4")
  assert recipes.get_recipe(r) is r
  hp = recipes.get_recipe(None)
  assert not hp.quantized and not hp.needs_key


def test_get_recipe_errors():
  with pytest.raises(ValueError, match=r"must be one of bf16, .*got 'fp9'"):
    recipes.get_recipe("fp9")
  with pytest.raises(TypeError, match=r"'nvfp4' takes no override margin; "
                     r"it takes rht, stochastic, weight_block, tensor_scale"):
    recipes.get_recipe("nvfp4", margin=2)
  with pytest.raises(TypeError, match="'mxfp8' takes no override rht; it "
                     "takes fwd, dgrad, wgrad, scale_mode"):
    recipes.get_recipe("mxfp8", rht=True)
  with pytest.raises(TypeError, match="an MX recipe takes no override rht"):
    recipes.get_recipe("mxfp6_e2m3", rht=True)
  with pytest.raises(TypeError, match="overrides for a named recipe"):
    recipes.get_recipe(recipes.get_recipe("bf16"), rht=True)
  with pytest.raises(TypeError, match="must be a Recipe, a name"):
    recipes.get_recipe(3)


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="fp8", format="e4m3"), "`kind` argument to `Quantizer`"),
    (dict(kind="block", format="e4m3"), "must be \\(1, N\\) or \\(N, N\\)"),
    (dict(kind="block", format="e4m3", block=(4, 8)), "got \\(4, 8\\)"),
    (dict(kind="tensor", format="e4m3", block=(1, 8)), "one scale per tensor"),
    (dict(kind="mx", format="mxfp8", block=(32, 32)), "MX blocks are 1-D"),
    (dict(kind="nvfp4", format="e2m1", block=(1, 32)), "NVFP4 blocks"),
    (dict(kind="nvfp4", format="e4m3"), "float4_e2m1fn for kind 'nvfp4'"),
    (dict(kind="cast", format="float32"), "use None"),
    (dict(kind="tensor", format="e8m0"), "signed format"),
    (dict(kind="block", format="e4m3", block=(1, 8), rounding="stochastic"),
     "stochastic rounding is for kinds"),
    (dict(kind="tensor", format="e4m3", scale="rceil"), "`scale` argument"),
    (dict(kind="mx", format="mxfp8", delayed=True), "delayed scaling is for"),
    (dict(kind="tensor", format="e4m3", delayed=True, transform="rht"),
     "can't follow a transform"),
    (dict(kind="mx", format="mxfp8", margin=1), "`margin` argument"),
    (dict(kind="tensor", format="e4m3", margin=127), "\\[-126, 126\\]"),
    (dict(kind="nvfp4", format="e2m1", transform="fft"), "`transform`"),
])
def test_quantizer_errors(kwargs, match):
  with pytest.raises((TypeError, ValueError), match=match):
    Quantizer(**kwargs)


def test_recipe_errors():
  q = Quantizer("nvfp4", "e2m1")
  t = dataclasses.replace(q, transform="rht")
  with pytest.raises(ValueError, match="take the same transform"):
    Recipe(fwd=(q, q), dgrad=(q, q), wgrad=(t, q))
  with pytest.raises(TypeError, match="quantizer of w must be a Quantizer"):
    Recipe(fwd=(q, "e4m3"), dgrad=(q, q), wgrad=(q, q))
  with pytest.raises(TypeError, match="must be a pair"):
    Recipe(fwd=q, dgrad=(q, q), wgrad=(q, q))
  a = Quantizer("tensor", "e4m3", delayed=True)
  b = Quantizer("tensor", "e5m2", delayed=True)
  with pytest.raises(ValueError, match="the delayed quantizers of x differ"):
    Recipe(fwd=(a, None), dgrad=(None, None), wgrad=(b, None))
