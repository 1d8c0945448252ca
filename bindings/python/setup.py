"""Builds torchtpu._C, the native PrivateUse1 backend, against libtorchtpu.so.

The runtime (`cargo build --release` at the repository root) must be built
first; `scripts/setup.sh` does both. An in-place (editable) build links the
package to the repository's library; a wheel carries its own copy, together
with the C header the cffi binding reads.
"""

import os
import shutil
from pathlib import Path

# Building must not load the extension being built (torch autoloads installed
# backends on import; a stale or broken _C would stop the build that fixes it).
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import torch  # noqa: E402
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
LIB_DIR = Path(os.environ.get("TORCHTPU_LIB_DIR", REPO / "target" / "release"))
LIB = LIB_DIR / "libtorchtpu.so"
HEADER = REPO / "include" / "torchtpu.h"
# csrc/profiler.cpp implements Kineto's activity-profiler interface, whose
# headers torch ships but does not put on the include path.
KINETO_INCLUDE = Path(torch.__file__).resolve().parent / "include" / "kineto"


class Build(BuildExtension):
    def run(self):
        if not LIB.exists():
            raise SystemExit(f"{LIB} is missing: build the runtime first (cargo build --release, or scripts/setup.sh)")
        pkg = HERE / "torchtpu" if self.inplace else Path(self.build_lib) / "torchtpu"
        pkg.mkdir(parents=True, exist_ok=True)
        dst = pkg / "libtorchtpu.so"
        if dst.is_symlink() or dst.exists():
            dst.unlink()
        if self.inplace:
            # Editable: always the library cargo just built.
            dst.symlink_to(os.path.relpath(LIB, pkg))
        else:
            shutil.copy2(LIB, dst)
            (pkg / "include").mkdir(exist_ok=True)
            shutil.copy2(HEADER, pkg / "include" / "torchtpu.h")
        super().run()


ext = CppExtension(
    "torchtpu._C",
    sources=[f"csrc/{n}" for n in ("autocast.cpp", "backend.cpp", "collectives.cpp", "generator.cpp", "kernels.cpp",
                                   "module.cpp", "profiler.cpp")],
    # A change to these rebuilds the extension.
    depends=["csrc/tpu.h", str(HEADER), str(REPO / "bindings" / "cpp" / "include" / "torchtpu" / "torchtpu.hpp")],
    include_dirs=[str(REPO / "include"), str(REPO / "bindings" / "cpp" / "include"), str(KINETO_INCLUDE)],
    # PyPI's torch is built with Kineto; its profiler headers need this to
    # declare the PrivateUse1 profiler registry.
    define_macros=[("USE_KINETO", "1")],
    library_dirs=[str(LIB_DIR)],
    libraries=["torchtpu"],
    extra_compile_args=["-O2", "-std=c++20", "-Wno-unused-parameter"],
    # libtorchtpu.so sits next to _C (a symlink in an editable install).
    extra_link_args=["-Wl,-rpath,$ORIGIN"],
)

setup(ext_modules=[ext], cmdclass={"build_ext": Build.with_options(use_ninja=True)})
