"""The blockps Python package for pip: the package's Python files and its two extension modules, _blockps (the
client library) and _shard_checkpoint (the checkpoint files' reader and writer), which CMake builds from this
source tree with BLOCKPS_TGT_MODULE, tests and benchmarks off, for the interpreter that runs pip.

    pip install --no-build-isolation --no-index client/python      (offline: Debian's python3-setuptools, -wheel)

Build prerequisites are the worker side's (scripts/setup.sh installs them): cmake, a C++20 compiler, pybind11-dev,
libiscsi-dev, libtomlplusplus-dev, nlohmann-json3-dev, libcli11-dev, zlib1g-dev, python3-dev.
"""
import atexit
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # the repository: client/python/setup.py
MODULES = ("_blockps", "_shard_checkpoint")
# pip builds in the package directory itself: setuptools' build/ and *.egg-info go to a scratch directory
# instead, so that an install leaves the source tree as it found it (a checkout stays clean).
SCRATCH = pathlib.Path(tempfile.mkdtemp(prefix="blockps-pip-build-"))
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)


def project_version():
    """The version of the top-level CMakeLists.txt's project() (one definition)."""
    text = (ROOT / "CMakeLists.txt").read_text()
    found = re.search(r"project\(blockps\s+VERSION\s+([0-9.]+)", text)
    if not found:
        sys.exit(f"blockps setup.py: no project(blockps VERSION ...) in {ROOT / 'CMakeLists.txt'}")
    return found.group(1)


class CMakeBuild(build_ext):
    """Builds both modules in one CMake build, then puts each where setuptools expects it."""

    def run(self):
        build = pathlib.Path(self.build_temp).resolve() / "cmake"
        configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     "-DBLOCKPS_TGT_MODULE=OFF", "-DBLOCKPS_TESTS=OFF", "-DBLOCKPS_BENCH=OFF", "-DBLOCKPS_CUDA=OFF",
                     f"-DBLOCKPS_PYTHON={sys.executable}"]
        jobs = str(self.parallel) if isinstance(self.parallel, int) and self.parallel > 1 else "2"
        try:
            subprocess.run(configure, check=True)
            subprocess.run(["cmake", "--build", str(build), "--target", "blockps_python", "-j", jobs], check=True)
        except FileNotFoundError:
            sys.exit("blockps setup.py: cmake not found (Debian: apt-get install cmake; scripts/setup.sh)")
        except subprocess.CalledProcessError as e:
            sys.exit(f"blockps setup.py: the CMake build failed ({e}); its output is above")
        self._built = build / "python" / "blockps"
        super().run()

    def build_extension(self, ext):
        name = ext.name.rsplit(".", 1)[1]
        found = sorted(self._built.glob(f"{name}.*.so")) or sorted(self._built.glob(f"{name}.so"))
        if not found:
            sys.exit(f"blockps setup.py: CMake built no {name} module in {self._built}")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found[0], target)


setup(
    name="blockps",
    version=project_version(),
    description="Workers of a blockps parameter server (block devices over iSCSI/iSER): numpy and PyTorch",
    packages=["blockps", "blockps.torch"],
    python_requires=">=3.9",
    install_requires=["numpy"],
    extras_require={"torch": ["torch"]},
    ext_modules=[Extension(f"blockps.{m}", sources=[]) for m in MODULES],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(SCRATCH / "build")}, "egg_info": {"egg_base": str(SCRATCH)}},
    zip_safe=False,
)
