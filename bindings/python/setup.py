"""Builds the `sotto` Python package: `sotto/` (ctypes) with the C library it loads beside it.

    pip install bindings/python                              # runs cargo for the library
    SOTTO_CARGO_FEATURES=cuda pip install bindings/python    # with the CUDA backend
    SOTTO_LIB=/path/to/libsotto_capi.so pip install bindings/python   # a library built before

The metadata is in pyproject.toml; this file only adds the library. Build from a checkout
(the library's source is two folders up); the wheel is tagged `py3-none-<platform>`: the
library does not depend on the Python version.
"""

import json
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 has its own
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LIBRARY = {"darwin": "libsotto_capi.dylib", "win32": "sotto_capi.dll"}.get(
    sys.platform, "libsotto_capi.so"
)


def _library():
    """The C library to ship: `$SOTTO_LIB`, else the one cargo builds now."""
    given = os.environ.get("SOTTO_LIB")
    if given:
        if not os.path.isfile(given):
            sys.exit(f"SOTTO_LIB={given}: no such file")
        return given
    manifest = os.path.join(ROOT, "Cargo.toml")
    if not os.path.isfile(manifest):
        sys.exit(f"{manifest} not found: build from a sotto checkout, or set SOTTO_LIB to a "
                 f"{LIBRARY} built before")
    cmd = ["cargo", "build", "--release", "--locked", "-p", "sotto-capi",
           "--manifest-path", manifest]
    features = os.environ.get("SOTTO_CARGO_FEATURES")
    if features:
        cmd += ["--features", features]
    try:
        subprocess.run(cmd, check=True)
        meta = subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--no-deps",
             "--manifest-path", manifest],
            check=True, capture_output=True, text=True,
        )
    except FileNotFoundError:
        sys.exit("cargo not found: install Rust (https://rustup.rs), or set SOTTO_LIB to a "
                 f"{LIBRARY} built before")
    except subprocess.CalledProcessError as e:
        sys.exit(f"{' '.join(e.cmd)} failed ({e.returncode})")
    return os.path.join(json.loads(meta.stdout)["target_directory"], "release", LIBRARY)


class BuildPy(build_py):
    """The Python sources, then the library into the package."""

    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "sotto", LIBRARY)
        shutil.copyfile(_library(), dest)


class PlatformWheel(bdist_wheel):
    """A wheel for this platform (it carries a native library) and any Python 3."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


setup(cmdclass={"build_py": BuildPy, "bdist_wheel": PlatformWheel})
