"""The package builds into a wheel that installs and imports in a fresh venv.

The wheel is built from this checkout by pip (the build backend pyproject.toml
names, fetched as ``pip install -e`` fetches it), installed with ``--no-deps``
into a new virtual environment that sees this interpreter's packages (jax,
numpy...), and imported from outside the checkout: the import must come from
the venv, with every subpackage and ``py.typed``.

The new venv reaches this interpreter's packages through a ``.pth`` file that
lists its site-packages folders, not through ``system_site_packages``: made
from inside a virtualenv, ``venv`` bases the new one on the base interpreter,
whose packages are not this one's.
"""
from __future__ import annotations

import os
import pathlib
import site
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
  venv.EnvBuilder(with_pip=False).create(env_dir)
  python = env_dir / "bin" / "python"
  # Without PYTHONPATH: pip would count a checkout on it as installed.
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  subprocess.run([sys.executable, "-m", "pip", "--python", str(python),
                  "install", "-q", "--no-deps", str(wheel)],
                 check=True, capture_output=True, text=True, timeout=300,
                 env=env)
  # This interpreter's packages, after the install (pip would take the
  # editable install of this checkout there for jaxfp8 installed). Plain
  # folder lines: that install's own .pth file is not run.
  purelib = subprocess.run(
      [str(python), "-c",
       "import sysconfig; print(sysconfig.get_path('purelib'))"],
      check=True, capture_output=True, text=True).stdout.strip()
  outer = site.getsitepackages() + (
      [site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
  pathlib.Path(purelib, "outer_site_packages.pth").write_text(
      "\n".join(outer) + "\n")
  proc = subprocess.run([str(python), "-c", _CHECK], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "448" in proc.stdout
