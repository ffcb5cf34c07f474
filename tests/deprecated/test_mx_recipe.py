"""The deprecated MX recipes (``jaxfp8.mx.MXRecipe``, ``get_recipe``):
presets, jmp-style strings and their checks."""
from __future__ import annotations

import pytest

from jaxfp8 import mx

# These tests exercise the deprecated names themselves.
pytestmark = pytest.mark.filterwarnings(
    "ignore:jaxfp8.mx.* is deprecated:DeprecationWarning")


def test_recipes_and_strings():
  assert mx.get_recipe("mxfp8") == mx.MXRecipe()
  r = mx.get_recipe("f=mxfp4,d=mxfp8_e5m2,w=none,scale=floor,block=16,sr=1")
  assert (r.fwd, r.dgrad, r.wgrad, r.scale_mode, r.block_size,
          r.stochastic_grad) == ("mxfp4_e2m1", "mxfp8_e5m2", None, "floor",
                                 16, True)
  assert mx.get_recipe("nvfp4").wgrad == "nvfp4"
  assert mx.get_recipe(None) == mx.MXRecipe(None, None, None)
  with pytest.raises(AttributeError):
    r.fwd = "mxfp8"  # frozen
  with pytest.raises(ValueError, match="bad entry"):
    mx.get_recipe("q=mxfp8")
  with pytest.raises(ValueError, match="fwd"):
    mx.MXRecipe(fwd="float8_e4m3fn")
  with pytest.raises(ValueError, match="scale_mode"):
    mx.MXRecipe(scale_mode="up")
