"""Builds cpu_kernels._ext with CMake against the MLX installed in the running interpreter.

Install it without build isolation, so that it links the very MLX the server imports:
    python -m pip install --no-build-isolation ./kernels
"""

from mlx import extension
from setuptools import setup

setup(
    ext_modules=[extension.CMakeExtension("cpu_kernels._ext", sourcedir=".")],
    cmdclass={"build_ext": extension.CMakeBuild},
    packages=["cpu_kernels"],
    package_data={"cpu_kernels": ["*.so"]},
    zip_safe=False,
)
