"""The package builds into a wheel that installs and imports in a fresh venv.

The wheel is built from this checkout by pip (the build backend pyproject.toml
names, fetched as ``pip install -e`` fetches it), installed with ``--no-deps``
into a new
virtual environment that sees this interpreter's packages (jax, numpy...),
and imported from outside the checkout: the import must come from the venv,
with every subpackage and ``py.typed``.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import venv
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

_CHECK = """
import pathlib, sys, jaxfp8
import jaxfp8.random, jaxfp8.mx, jaxfp8.ops, jaxfp8.es, jaxfp8.policy
import jaxfp8.nn.initializers, jaxfp8.checkpoint, jaxfp8.tools.cli
root = pathlib.Path(jaxfp8.__file__).parent
assert str(root).startswith(sys.prefix), (root, sys.prefix)
assert (root / "py.typed").exists()
import jax.numpy as jnp
print(jaxfp8.cast(jnp.array([465.0]), "e4m3"))
"""


def test_wheel_installs_and_imports_in_a_fresh_venv(tmp_path):
  dist = tmp_path / "dist"
  subprocess.run(
      [sys.executable, "-m", "pip", "wheel", "--no-deps",
       "-q", "-w", str(dist), str(ROOT)],
      check=True, capture_output=True, text=True, timeout=300,
      cwd=tmp_path)
  wheel, = dist.glob("jaxfp8-*.whl")
  names = zipfile.ZipFile(wheel).namelist()
  for needed in ("jaxfp8/py.typed", "jaxfp8/_src/numerics/rounding.py",
                 "jaxfp8/_src/random/__init__.py", "jaxfp8/tools/cli.py",
                 "jaxfp8/tools/report/__init__.py",
                 "jaxfp8/tools/report/command.py"):
    assert needed in names, needed
  env_dir = tmp_path / "venv"
  venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
  python = env_dir / "bin" / "python"
  subprocess.run([sys.executable, "-m", "pip", "--python", str(python),
                  "install", "-q", "--no-deps", str(wheel)],
                 check=True, capture_output=True, text=True, timeout=300)
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  proc = subprocess.run([str(python), "-c", _CHECK], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "448" in proc.stdout
